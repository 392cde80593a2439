"""A large population split into shards: each shard is a population agent with its share
of the clients and its own random stream, so the shards can run on different hosts.

What the rest of the world sees is still one population: devices share their admission
between populations, not shards (``source_of``); a dependent merges the shards' health
(``HealthReports``); monitoring merges the shards' telemetry
into one report; triggers and mitigations that target the population reach every shard,
with rates split by clients; the journal and the score get the population's metrics
merged from its shards' (counts add up, ratios are recomputed from the counts).
"""
from __future__ import annotations

#: A population split into shards is simulated as agents named ``<population>#<index>``.
SHARD_SEP = "#"


def shard_name(population: str, index: int) -> str:
    return f"{population}{SHARD_SEP}{index}"


def source_of(agent: str) -> str:
    """The population a shard belongs to (any other agent: itself)."""
    return agent.split(SHARD_SEP, 1)[0]

#: ratio metric -> (numerator, denominator terms, value when the denominator is 0);
#: the same definitions as the population's own metrics
RATIOS = {
    "success_ratio": ("ok", ("ok", "failed"), 1.0),
    "error_ratio": ("errors", ("ok", "errors"), 0.0),
}

#: population operation -> its arguments that are totals for the whole population
EXTENSIVE_ARGS = {"surge": ("extra_setups_per_second",)}


def split_clients(clients: int, count: int) -> list[int]:
    """Clients per shard: as even as integers allow, the first shards one larger."""
    return [clients // count + (1 if i < clients % count else 0) for i in range(count)]


def shard_specs(spec: dict, count: int) -> list[dict]:
    """The playbook section of each shard of a population."""
    clients = int(spec["clients"])
    out = []
    for i, n in enumerate(split_clients(clients, count)):
        part = dict(spec, name=shard_name(spec["name"], i), clients=n)
        if spec.get("max_rate") is not None:
            part["max_rate"] = float(spec["max_rate"]) * n / clients
        out.append(part)
    return out


def metrics_needed(metrics: list[str]) -> list[str]:
    """The metrics a shard must report for these merged metrics to be computed."""
    out = list(metrics)
    for m in metrics:
        if m in RATIOS:
            num, den, _ = RATIOS[m]
            out += [c for c in (num, *den) if c not in out]
    return list(dict.fromkeys(out))


def merge_metrics(parts: list[dict[str, float]]) -> dict[str, float]:
    """One population's metrics from its shards' metrics (the keys all parts have)."""
    keys = [k for k in parts[0] if all(k in p for p in parts)]
    total = {k: sum(p[k] for p in parts) for k in keys if k not in RATIOS}
    for k in keys:
        if k in RATIOS:
            num, den, empty = RATIOS[k]
            d = sum(total[c] for c in den)
            total[k] = total[num] / d if d else empty
    return {k: total[k] for k in keys}


def apply_to_shards(op: str, args: dict, shards: list[tuple[str, float]]) -> list[tuple[str, dict]]:
    """(shard, args) for an operation on a sharded population: totals are split by each
    shard's share of the clients, everything else is the same for every shard."""
    out = []
    for name, share in shards:
        part = dict(args)
        for a in EXTENSIVE_ARGS.get(op, ()):
            if a in part:
                part[a] = float(part[a]) * share
        out.append((name, part))
    return out


class HealthReports:
    """Health reports as an inbox is read: another agent's ratio counts at once (in inbox
    order, as always); a sharded population's shards' reports are added up and count
    once all are read (``merge``)."""

    def __init__(self, into: dict[str, float]):
        self.into = into
        self.parts: dict[str, list[float]] = {}

    def take(self, msg) -> None:
        pop = source_of(msg.src)
        if pop == msg.src:
            self.into[pop] = float(msg.body["ratio"])
        else:
            acc = self.parts.setdefault(pop, [0.0, 0.0])
            acc[0] += float(msg.body["ok"])  # a population's health carries its counts, which add up over shards
            acc[1] += float(msg.body["resolved"])

    def merge(self) -> None:
        for pop, (ok, resolved) in self.parts.items():
            self.into[pop] = ok / resolved if resolved else 1.0
