"""The simulated parts of a world. Pure step machines: no Ray, ZeroMQ or CLI in here."""
from .automation import Automation
from .controller import Controller
from .base import OUTSIDE, PROTOCOL_VERSION, UNWIRED, Agent, Message, StepResult, Wiring, WorldInfo, agent_rng
from .deployment import Deployment
from .device import DevicePool
from .monitoring import Monitoring
from .operator import ConsoleOperator, NoOperator, RunbookOperator
from .population import Population
from .service import Service
from .status import StatusDashboard

#: agent kind (as named in a world's build plan) -> class. The client-by-client reference
#: population (reference.py) is not one of them: the tests register it to check the cohort model.
AGENT_CLASSES: dict[str, type[Agent]] = {
    "automation": Automation,
    "population": Population,
    "device": DevicePool,
    "service": Service,
    "monitoring": Monitoring,
    "deployment": Deployment,
    "status": StatusDashboard,
    "controller": Controller,
    "operator:none": NoOperator,
    "operator:runbook": RunbookOperator,
    "operator:console": ConsoleOperator,
}

__all__ = ["AGENT_CLASSES", "OUTSIDE", "PROTOCOL_VERSION", "UNWIRED", "Agent", "Message", "StepResult", "Wiring", "WorldInfo",
           "agent_rng"]
