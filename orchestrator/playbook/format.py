"""The playbook and runbook format, written once: every field with its type, default,
range, unit and meaning, and every runbook condition. Validation (``checks.py``), the
reference (``gameday playbooks reference``) and the JSON Schema (``gameday playbooks
schema``) are all read from here; the operations a mitigation can apply are declared on
the agents' ``op_`` methods (``agents.base.operation``).
"""
from __future__ import annotations

from dataclasses import dataclass, field as dfield

from agents.base import FAULT_KINDS
from agents.controller import METRIC_IS
from agents.limits import LONGEST_DELAY, MOST_ATTEMPTS
from agents.monitoring import WHEN_STALE
from agents.population import MODES, WHILE_RECONNECTING, WORKS
from agents.retry import BACKOFFS, BREAKER_DEFAULTS, JITTERS, RECONNECT_ON

from orchestrator.playbook.schema import Field, L, M, names, non_negative, positive, ratio
from reports.decide import DEFAULT_DELTA_SHARE, DEFAULT_PRIMARY, PRIMARY
from reports.gate import GRAMMAR as GATE_GRAMMAR, METRICS as GATE_METRICS


def _names(doc: str, item: str, example: list, **kw) -> Field:
    """``names`` (a list of names, empty by default) whose items say what they name."""
    f = names(doc, example=example, **kw)
    f.item.doc = item
    return f


#: the most clients a population and keys a cache may have (the model draws them hypergeometrically, exact below 10^9)
MOST_DRAWN = 500_000_000
#: the most of the parts the model steps one by one every tick (a load balancer's targets, DNS enactors and
#: plan generations, a post's backend calls, a mitigation's deployment steps): time grows with them
MOST_STEPPED = 10_000
#: the most shards a population may be simulated as (each is an agent, a Ray actor's work)
MOST_SHARDS = 1024

_POOL = "the name of a device pool"
_HEALTH_SOURCE = "the name of a service or a population"


#: a check on the score: a threshold, written as k6 writes them, on one measure of the runs over the seeds
#: (``gameday check``; reports/gate.py parses and judges it)
CHECK = M("a check on the score: a threshold one measure of the runs must keep over the seeds (`gameday check`)",
          name=Field("str", default="", example="loop broken within 30 minutes in 90% of seeds",
                     doc="what the check is called in the output and the JUnit report (default: its metric and "
                         "threshold)"),
          metric=Field("str", choices=tuple(GATE_METRICS), required=True, example="loop_broken",
                       doc="the measure: " + "; ".join(f"{k}, {what}" for k, (_, what) in GATE_METRICS.items())),
          threshold=Field("str", required=True, example="p(90) <= 30m",
                          doc=GATE_GRAMMAR + ". p(90) <= 30m: at least 90% of the seeds' runs at most 30 minutes; "
                              "max: every seed; a run that never got there counts as above any bound"))


#: what holds request retries back (a population's ``retry``; reconnections have neither)
_BUDGET = M("a token-bucket retry budget: every fresh request earns `ratio` tokens, every retry spends one; a "
            "perishable retry without a token fails for good, durable work waits for one",
            ratio=ratio(required=True, unit="tokens per fresh request", example=0.1,
                        doc="tokens each fresh request earns: the retries allowed per fresh request in the long run"),
            capacity=positive(default=100.0, unit="tokens",
                              doc="most tokens the bucket holds (it starts full): the burst of retries it allows"))
_CIRCUIT_BREAKER = M("a client-side circuit breaker: while open, requests fail at once without touching the network "
                     "(and are retried or given up like any failure)",
                     threshold=ratio(default=BREAKER_DEFAULTS["threshold"], unit="share of failed attempts (0-1)",
                                     doc="it opens when more than this share of the attempts over `window` failed"),
                     window=positive("duration", default=BREAKER_DEFAULTS["window"],
                                     doc="the sliding window the failure share is measured over (also how long it "
                                         "stays half-open)"),
                     open_for=positive("duration", default=BREAKER_DEFAULTS["open_for"], doc="how long it stays open"),
                     probe_fraction=ratio(default=BREAKER_DEFAULTS["probe_fraction"], unit="share of requests (0-1)",
                                          doc="half-open, after `open_for`: the share of requests let through for one "
                                              "window"))


def _retry(doc: str, requests: bool = True) -> Field:
    """A retry policy (a population's ``retry`` and its ``connection.reconnect``); the
    budget and the circuit breaker hold back request retries only (``requests``)."""
    held_back = {"budget": _BUDGET, "circuit_breaker": _CIRCUIT_BREAKER} if requests else {}
    return M(
        doc, default=dict,
        backoff=Field("str", choices=BACKOFFS, default="exponential",
                      doc="how the nominal delay grows: none, the next attempt goes at once (the next tick); constant, "
                          "every delay is base; exponential, the delay after the k-th failure is base x multiplier^(k-1), "
                          "at most cap"),
        base=non_negative("duration", default=1.0, max=LONGEST_DELAY,
                          doc="nominal delay before the first retry (constant back-off: before every retry); 0 retries "
                              "at once"),
        multiplier=Field("number", min=1, default=2.0,
                         doc="exponential back-off: each nominal delay is this many times the one before"),
        cap=non_negative("duration", default=60.0, max=LONGEST_DELAY,
                         doc="largest nominal delay: exponential growth stops here (jitter draws within it)"),
        jitter=Field("str", choices=JITTERS, default="full",
                     doc="how the actual delay is drawn from the nominal delay d: none, exactly d; full, uniformly in "
                         "[0, d]; equal, uniformly in [d/2, d]; decorrelated (Brooker, with exponential back-off), each "
                         "sleep uniformly in [base, 3 x the previous sleep], at most cap (multiplier is not used; with "
                         "constant back-off every sleep is uniform in [base, 3 x base])"),
        max_attempts=non_negative("int", default=0, max=MOST_ATTEMPTS, unit="attempts",
                                  doc="request retries: attempts including the first, after which a perishable request "
                                      "fails for good (durable work is never given up); 0 = unlimited. In "
                                      "connection.reconnect clients never stop reconnecting: a non-zero value only stops "
                                      "the back-off growing after that many attempts. validate warns where a "
                                      "population of perishable work leaves it at this default"),
        **held_back,
    )


#: a population's request retry policy
RETRY = _retry("how a failed request is retried: the delay before each attempt, how many attempts, and the budget "
               "and circuit breaker that hold retries back")

EFFECT = M("an operation applied to one part of the world: {target: NAME, op: OPERATION, args: {...}}",
           target=Field("str", required=True, example="bridge",
                        doc="the part it applies to: a device pool, service, population or controller by name, or monitoring, "
                            "deployment, status or triggers; an effect on a sharded population reaches every shard"),
           op=Field("str", required=True, example="add_devices",
                    doc="the operation, one of those the target's kind of part has (its op_ methods)"),
           args=Field("dict", default=dict, example={"count": "$devices"},
                      doc="the operation's arguments; in a mitigation or fault, \"$NAME\" stands for its param NAME and "
                          "\"$requester\" for whoever asked"))

DEVICE = M(
    "a pool of identical bridge devices (routers doing NAT between two networks): a CPU budget per tick, a cost per "
    "item, a connection-tracking table and a queue whose delay grows with utilisation",
    name=Field("name", required=True, example="bridge",
               doc="the pool's name: populations, monitoring, deployment and status cross it by naming it in their "
                   "path, effects target it"),
    description=Field("str", default="", example="the bridge devices between the main and the internal network",
                      doc="what the pool stands for (for people)"),
    count=non_negative("int", required=True, unit="devices", example=8,
                       doc="devices in the pool at the start; the CPU budget and the connection table scale with it, "
                           "and a pool of 0 devices passes nothing"),
    cpu_per_device=positive(required=True, unit="work units/s", example=60000,
                            doc="work units per second one device can process (each item costs `costs`)"),
    costs=M("CPU cost per item in work units", default=dict,
            setup=non_negative(default=20.0, unit="work units",
                               doc="a new connection (NAT translation, state creation): the expensive class; a "
                                   "per-request (UDP-style) flow costs a setup plus a request"),
            request=non_negative(default=1.0, unit="work units",
                                 doc="forwarding a request on an established connection"),
            reject=non_negative(default=0.5, unit="work units",
                                doc="a cheap rejection, by protection's admission control or a full connection table")),
    conntrack=M("connection tracking: every established connection and every half-open setup holds an entry",
                default=dict,
                capacity_per_device=positive(default=1e9, unit="connections",
                                             doc="entries per device; setups beyond the free entries are rejected. "
                                                 "The default 1e9 is as good as unlimited"),
                half_open_timeout=positive("duration", default=30.0,
                                           doc="how long a setup that did not complete in time (and every per-request "
                                               "flow) holds its entry")),
    queue=M("queueing in the devices", default=dict,
            buffer=non_negative("duration", default=5.0,
                                doc="how much work the buffers hold, in seconds of the pool's CPU; work beyond it is "
                                    "dropped (its callers time out)"),
            base_latency=positive("duration", default=0.002,
                                  doc="an item's delay through an idle pool; the mean delay is base_latency / "
                                      "(1 - utilisation) plus the queue's wait"),
            protection_target=non_negative("duration", default=0.05,
                                           doc="with protection on: admission keeps the queue under this many seconds "
                                               "of work, and rejects the rest cheaply")),
    protection=Field("bool", default=False,
                     doc="per-source admission control: each population is admitted up to a max-min fair share of "
                         "the CPU budget, its excess rejected cheaply and at once, which keeps the queue and the delay "
                         "short (the operation set_protection switches it)"),
)

SERVICE = M(
    "a service: capacity, dependencies, and the features a playbook can switch on (recycling, a queue, service "
    "times, leases, health checks, DNS automation)",
    name=Field("name", required=True, example="internal-dns",
               doc="the service's name: populations target it, others depend on it, effects target it"),
    description=Field("str", default="", example="internal DNS, on the internal network",
                      doc="what the service stands for (for people)"),
    capacity=positive(default=1e12, unit="requests/s",
                      doc="requests per second it can serve (work units: a request or a lease renewal costs one, a "
                          "lease re-establishment `reestablish_cost`); the default 1e12 is unlimited"),
    depends_on=_names("services and populations it needs: a request it takes on is answered well with the chance "
                      "given by the product of their latest success ratios. Services that depend on each other in a "
                      "cycle and all fail at once stay failed, as a bootstrapping deadlock does: none can succeed "
                      "first", _HEALTH_SOURCE, ["control-plane"]),
    recycling=M("servers that break while a dependency fails and need recycling, which only works while another "
                "service does: recovery that depends on something itself impaired. Broken servers take capacity "
                "away and fail the requests they get",
                breaks_when=Field("str", required=True, example="control-plane",
                                  doc="the service or population whose health breaks servers while it is low"),
                below=ratio(default=0.5, unit="success ratio (0-1)",
                            doc="servers break while breaks_when's success ratio is below this"),
                break_rate=non_negative(default=0.01, unit="share of servers/s",
                                        doc="share of the servers that break per second while breaks_when is below "
                                            "the threshold"),
                max_broken=ratio(default=0.8, unit="share of servers (0-1)", doc="the most servers broken at once"),
                needs=Field("str", example="ec2-api",
                            doc="the service or population that must work (success ratio at least 0.9) for broken "
                                "servers to be recycled, automatically or by the recycle operation; unset: they are "
                                "recycled whenever breaks_when is healthy again"),
                repair_rate=non_negative(default=0.001, unit="share of servers/s",
                                         doc="share of the servers recycled per second while breaks_when is back "
                                             "above the threshold and `needs` works")),
    fail_fast=Field("bool", default=False,
                    doc="a request it cannot serve gets an error at once, not a timeout (its callers retry at once)"),
    fault=M("a fault (toxic): a share of the requests fail whatever the load (the operation fault changes it)",
            default=dict,
            share=ratio(default=0.0, unit="share of requests (0-1)",
                        doc="share of the requests that would have succeeded that fail instead; 0: no fault"),
            kind=Field("str", choices=FAULT_KINDS, default="timeout",
                       doc="how they fail: timeout, the caller waits out its timeout; error, refused at once"),
            latency=non_negative("duration", default=0.0,
                                 doc="delay added to every answer; requests it makes later than their caller's "
                                     "timeout fail as timeouts"),
            jitter=non_negative("duration", default=0.0,
                                doc="mean of a further exponential delay drawn for each request")),
    then=Field("str", example="network-manager",
               doc="a service every request answered well goes on to; the caller gets that one's answer (each "
                   "service's success_ratio counts its own part only: the callers' metrics show the chain's)"),
    queue=M("a work queue in front of the service: requests wait their turn, and those that waited longer "
            "than their caller's timeout are still worked on, for nobody (congestive collapse). A tick's arrivals "
            "come at random times within it (beyond 4,096, in 4,096 parcels) and the service works whenever work "
            "waits, so waits far shorter than a tick are those of random arrivals, and each request's wait is set "
            "against its caller's timeout; its answer is a message, heard the tick after it is sent",
            limit=positive("duration", default=3600.0,
                           doc="seconds of work, at the service's mean capacity, the queue holds; arrivals beyond it "
                               "are refused at once (cheap for everyone). The default holds an hour")),
    service_time=M("how long a request's work takes: deterministic, the service works at an even pace (a busy "
                   "tick does exactly its capacity); "
                   "exponential, each request's service time is exponential at rate capacity, so the requests "
                   "done in a busy tick of length dt are Poisson(capacity x dt); gamma, the work done in a busy "
                   "tick has mean capacity x dt and variance cv^2 x capacity x dt (cv: the service times' "
                   "coefficient of variation). With a queue, exponential and gamma draw every completion while the "
                   "service is busy, so their cost grows with the capacity: a busy queue of 150,000 requests/s took "
                   "17 times as long to simulate as a deterministic one (34 s against 2 s for 30 minutes)",
                   default=dict,
                   distribution=Field("str", choices=("deterministic", "exponential", "gamma"), default="deterministic",
                                      doc="the service times' distribution: deterministic, exponential or gamma (see "
                                          "service_time)"),
                   cv=positive(default=1.0, doc="coefficient of variation of the service times (gamma only)")),
    leases=M("leases with a time to live that the service holds in a store service (see agents/leases.py); their "
             "renewals and re-establishments are work of this service (through its throttle and queue)",
             count=positive("int", required=True, unit="leases", example=50000,
                            doc="leases held (say, one per server managed)"),
             store=Field("str", required=True, example="dynamodb",
                         doc="the service the leases are kept in; a renewal succeeds with the chance given by its "
                             "latest success ratio (a store that fails some of its requests lets some leases lapse). "
                             "The renewals are work of this service, not of the store (they do not load it)"),
             ttl=positive("duration", default=300.0,
                          doc="a lease not renewed for this long expires (a whole number of renewal periods)"),
             renew_every=positive("duration", default=60.0,
                                  doc="how often each lease is renewed; the renewals are spread evenly over the period"),
             retry_every=positive("duration", default=60.0,
                                  doc="how often, on average, an expired lease's re-establishment is tried"),
             timeout=positive("duration", default=30.0,
                              doc="lease work that waited longer than this in the service's queue fails"),
             reestablish_cost=positive(default=1.0, unit="work units",
                                       doc="units of work re-establishing a lease costs (a renewal costs 1)")),
    health_checks=M("the service is a load balancer whose health checks take targets out of service and put "
                    "them back. A check fails only when its checker or its target has no network yet (a new one, "
                    "while the `network` service's queue wait, the propagation delay, has not passed), not because "
                    "the target is slow or overloaded; after `fall` failures in a row a target goes out of service, "
                    "after `rise` passes it comes back. The service's capacity scales with the share of its targets "
                    "in service (`targets_in_service`), and callers of a removed target keep getting connection "
                    "errors for `dns_ttl`",
                    network=Field("str", required=True, example="network-manager",
                                  doc="the service (with a queue) whose queue wait is the network propagation delay"),
                    targets=positive("int", default=100, max=MOST_STEPPED, unit="targets", doc="the load balancer's targets (nodes)"),
                    interval=positive("duration", default=10.0, doc="how often every target is checked"),
                    fall=positive("int", default=3, unit="checks", doc="failed checks in a row that take a target out"),
                    rise=positive("int", default=3, unit="checks", doc="passed checks in a row that put it back"),
                    checker_turnover=non_negative(default=0.0, unit="share per hour",
                                                  doc="share of the health-check fleet that is new each hour; a new "
                                                      "checker has no network until the propagation delay has passed, "
                                                      "and its checks fail"),
                    target_turnover=non_negative(default=0.0, unit="share per hour",
                                                 doc="share of the targets that are new each hour; a new target cannot "
                                                     "answer until its network has propagated"),
                    dns_ttl=positive("duration", default=60.0,
                                     doc="how long callers keep sending to a removed target (and get connection errors)"),
                    failover=Field("bool", default=True,
                                   doc="failed checks take targets out of service; false: every target stays in")),
    dns=M("DNS automation for the service's endpoint: a planner, enactors and their clean-up (see agents/dns.py); "
          "while the endpoint has no records nobody reaches the service",
          plan_every=positive("duration", default=60.0, doc="how often the planner makes a new plan"),
          enactors=positive("int", default=3, max=MOST_STEPPED, unit="enactors", doc="enactors applying plans (one per zone, say)"),
          delay=positive("duration", default=5.0,
                         doc="how long an enactor usually takes to apply a plan (each application takes 0.5 to 1.5 "
                             "times this, at least a tick)"),
          slow_chance=ratio(default=0.0, unit="probability (0-1)",
                            doc="chance that an application is badly delayed (takes slow_delay)"),
          slow_delay=positive("duration", default=600.0, doc="how long a badly delayed application takes"),
          cleanup_after=positive("duration", default=30.0,
                                 doc="how long after applying a plan an enactor cleans up old plans"),
          keep=positive("int", default=3, max=MOST_STEPPED, unit="plan generations",
                        doc="the clean-up deletes the plans more than this many generations older than the one its "
                            "enactor applied"),
          guard=Field("bool", default=False, doc="skip stale plans and never delete the plan in place")),
    cache=M("the service is a cache in front of a store service: callers ask for keys of "
            "Zipf popularity; a lookup of a fresh key is answered by the cache (at the service's own capacity), "
            "a miss is asked of the store and its caller is answered when the store answers (or at its timeout). "
            "A missed key is fetched for the time its store request takes, not for the ticks its answer takes to "
            "come back: lookups of it before its answer miss too (and, without coalescing, ask the store again); "
            "later ones find it stored if the store answered well (lookups fall at random points of a tick, a hot "
            "key's first miss early in it). A store with a queue answers in the order it is asked: the cache tells "
            "when from the store's health (its queue's wait, the pace it works at, its limit, a fault's delay) and "
            "the requests the cache sent since, so a request sent as the queue fills waits longer than one sent "
            "before (a refusal past the limit stores nothing); a store without a queue answers as its last answers "
            "did. What needs the next tick: the store's answer itself is a message (asked at one tick, answered at "
            "the next, heard at the one after), so a miss's caller hears two ticks later, which is not counted "
            "against its timeout (as the ticks a request the cache answers at once takes are not); the store's "
            "health is a tick's message too, so what other callers ask of it shows a tick later. The operations "
            "flush_cache, set_coalescing, set_serve_stale, "
            "set_evict_on_error and set_cache_ttl change it during a run",
            store=Field("str", required=True, example="user-db",
                        doc="the service misses are asked of (another service; it answers the cache)"),
            keys=positive("int", required=True, max=MOST_DRAWN, unit="keys", example=1000000,
                          doc="distinct keys the callers ask for"),
            size=positive("int", max=MOST_DRAWN, unit="keys", example=100000,
                          doc="most keys the cache holds; beyond it a new key replaces one drawn at random. "
                              "Unset: it can hold every key"),
            zipf=non_negative(default=1.0, max=10, unit="exponent s",
                              doc="popularity: the k-th most popular key is asked k^-s times as often as the first "
                                  "(0: every key equally; about 0.6 to 1.2 for web objects)"),
            ttl=positive("duration", example=300.0,
                         doc="how long a stored key stays fresh, on average: its life passes through min(16, ttl / "
                             "tick) stages of equal mean length (an Erlang time: it varies by a quarter with 16 "
                             "stages, more for a ttl under 16 ticks; at least a tick); a lapsed key's value is kept, "
                             "stale, until it is replaced. set_cache_ttl changes the pace of every stored key from "
                             "then on (a longer ttl stretches what is left of their lives alike). Unset: fresh until "
                             "replaced or evicted"),
            start=Field("str", choices=("warm", "cold"), default="warm",
                        doc="warm: at the first traffic it holds the keys it would hold in the long run at that "
                            "rate; cold: empty (a cache just deployed or restarted)"),
            timeout=positive("duration", default=5.0,
                             doc="how long the cache waits for the store (the store request's timeout)"),
            coalesce=Field("bool", default=False,
                           doc="request coalescing: one store request per key in flight at a time; other misses of "
                               "the key wait for it (the operation set_coalescing switches it)"),
            serve_stale=Field("bool", default=False,
                              doc="a miss whose store request fails is answered with the key's stale value, if there "
                                  "is one (the operation set_serve_stale switches it)"),
            evict_on_error=Field("bool", default=False,
                                 doc="a latent behaviour of many cache clients: a failed answer deletes its key (even "
                                     "one another request has just stored), when it comes: a refusal at once, a "
                                     "timeout when the cache's timeout is up; and an unexpected answer from the cache "
                                     "(the service's fault) deletes the key and asks the store")),
)

POPULATION = M(
    "a client population: clients that send requests along a path of device pools (and maybe to a service), "
    "retry failures and, in pooled mode, hold connections",
    name=Field("name", required=True, example="internal-clients",
               doc="the population's name: effects target it, scoring and others' depends_on name it"),
    description=Field("str", default="", example="clients on the internal network with pooled connections",
                      doc="what the population stands for (for people)"),
    clients=positive("int", required=True, max=MOST_DRAWN, unit="clients", example=20000,
                     doc="clients in the population (pooled clients all start connected)"),
    rate=non_negative(required=True, unit="requests/s per client", example=0.05,
                      doc="fresh requests per client per second"),
    mode=Field("str", choices=MODES, default="pooled",
               doc="pooled: each client holds a connection across the path (with a lifetime) and sends its requests "
                   "on it; per_request: every request is a new flow, a connection setup on every device (like DNS "
                   "over UDP), and `connection` does not apply"),
    work=Field("str", choices=WORKS, default="perishable",
               doc="perishable: a request that fails retry.max_attempts times is an error for good; durable: kept "
                   "and retried until done (a backlog), dispatched at most max_rate per second"),
    max_rate=non_negative(unit="requests/s", example=9500,
                          doc="durable work: most requests dispatched per second (required for durable work, ignored "
                              "for perishable)"),
    health=Field("str", choices=("attempts", "clients_without_backlog"), default="attempts",
                 doc="what the population reports as its health to what depends on it (depends_on, recycling): "
                     "attempts, the success ratio of its request attempts; clients_without_backlog (durable work), "
                     "the share of its clients with no work pending, as for servers that stay out of service until "
                     "they have fetched what they need"),
    shards=positive("int", default=1, max=MOST_SHARDS, unit="shards",
                    doc="simulate as this many shards (at most one per client), which can run on different hosts; "
                        "1: one agent"),
    path=_names("device pools crossed, in order; empty: straight to the target", _POOL, ["bridge"]),
    target=Field("str", example="internal-dns",
                 doc="the service the requests go to after the path; unset: the last device of the path answers "
                     "(with neither path nor target every request succeeds at once)"),
    depends_on=_names("services and populations it needs: a fresh request fails locally (and is retried) with the "
                      "chance that one of them fails, from their latest success ratios", _HEALTH_SOURCE,
                      ["internal-dns"]),
    connection=M("pooled connections (pooled mode only)", default=dict,
                 lifetime=positive("duration", default=600.0,
                                   doc="mean lifetime of a connection; at its end the client opens the next one "
                                       "before closing the old one"),
                 timeout=positive("duration", default=3.0, max=LONGEST_DELAY,
                                  doc="connect timeout: a connection setup not completed within it fails"),
                 reconnect=_retry("how a client that lost its connection, or failed to get one, waits before its next "
                                  "connection attempt (clients never give up reconnecting)", requests=False),
                 reconnect_on=L(Field("str", choices=RECONNECT_ON,
                                      doc="timeout: no answer within request.timeout; reject: refused at once"),
                                doc="the request failures that make a client drop its connection and reconnect (its "
                                    "retry then waits for the new connection)",
                                default=lambda: ["timeout"], example=["timeout", "reject"]),
                 while_reconnecting=Field("str", choices=WHILE_RECONNECTING, default=WHILE_RECONNECTING[0],
                                          doc="what a fresh request does when its client has no connection (client "
                                              "libraries differ): fail, it fails at once, for good (an error nothing "
                                              "retries); queue, it waits for the client's connection and goes out on "
                                              "it, or, if that connection attempt fails, fails as an attempt that the "
                                              "retry policy retries or gives up (as a retry waiting for a connection "
                                              "does). Perishable work only: durable work always waits")),
    request=M("requests", default=dict,
              timeout=positive("duration", default=5.0, max=LONGEST_DELAY,
                               doc="request timeout: an attempt not answered within it fails (and may be retried)")),
    retry=RETRY,
    bugs=M("latent bugs, which a trigger or mitigation can switch (operation set_bug)", default=dict,
           reconnect_ignores_backoff=Field("bool", default=False,
                                           doc="connection re-establishment ignores connection.reconnect and waits a "
                                               "fixed reconnect_delay, whatever the attempt (the 2021 bug)"),
           reconnect_delay=positive("duration", example="10s", max=LONGEST_DELAY,
                                    doc="the fixed delay of the buggy path, from when the failure is noticed; "
                                        "default: connection.timeout")),
)

ALARM = M("an alarm on an observed metric, evaluated on the operators' view; exactly one of above, below, no_data",
          name=Field("str", required=True, example="bridge-hot",
                     doc="the alarm's name (a runbook's {alarm: NAME} condition refers to it)"),
          metric=Field("str", required=True, example="bridge.utilisation",
                       doc="the metric it watches, one of monitoring.observe"),
          above=Field("number", example=0.9, doc="fires while the observed value is greater than this"),
          below=Field("number", example=0.5, doc="fires while the observed value is smaller than this"),
          no_data=Field("bool", default=False,
                        doc="fires while the metric has no value fresher than monitoring.stale_after (above and below "
                            "never fire on a stale value)"),
          when_stale=Field("str", choices=WHEN_STALE, default=WHEN_STALE[0],
                           doc="what an above or below alarm does while its metric has no value fresher than "
                               "monitoring.stale_after: clear (stop firing, journalled as cleared with its data stale; "
                               "CloudWatch's missing or notBreaching) or hold (keep firing, or not, as it was, and keep "
                               "counting its for; CloudWatch's ignore)"),
          **{"for": non_negative("duration", default=60.0,
                                 doc="the condition must hold this long in the operators' view before the alarm fires")})

RULE = M("a rule: when its condition holds, request a mitigation (or several)",
              name=Field("str", default="", example="move internal DNS off the bridge",
                         doc="journalled when the rule fires (empty: rule N, its place in the list)"),
              when=Field("dict", required=True, example={"alarm": "dns-errors", "for": "5m"},
                         doc="the condition: a mapping with exactly one of the condition keys (all, any, not, at, "
                             "no_data, metric, log, alarm, done, not_done)"),
              do=Field("any", required=True, example={"action": "add_capacity", "params": {"devices": 4}},
                       doc="the mitigation to request: its name, or {action: NAME, params: {...}} overriding some of "
                           "its params; or a list of those, requested in order when the rule fires"),
              repeat=Field("bool", default=False,
                           doc="fire again while the condition holds, at most once every `every`; false: fire once"),
              every=positive("duration", default=600.0, doc="least time between two firings of a repeating rule"))

AUTOSCALER = M(
    "target tracking of one service's instances: it reads an observed metric and sets the instances so that the metric "
    "reads `target` (desired = instances x value / target for an average, value / target for a total), within "
    "min and max; instances it adds are asked of a provisioning service and serve after their lead time; instances it "
    "removes stop at once. A value older than max_age (lost telemetry) changes nothing",
    service=Field("str", required=True, example="web", doc="the service whose capacity its instances are"),
    instances=positive("int", required=True, unit="instances", example=40,
                       doc="instances serving at the start: the service's capacity is theirs, so each serves "
                           "capacity / instances"),
    metric=Field("str", required=True, example="web.utilisation",
                 doc="the observed metric it tracks (AGENT.METRIC, one of monitoring.observe)"),
    metric_is=Field("str", choices=METRIC_IS, default="average",
                    doc="average: the metric is per instance, as CPU utilisation is; total: the instances share it, "
                        "as requests per second are"),
    target=positive(required=True, example=0.6, doc="the value of the metric it aims at"),
    min=non_negative("int", default=1, unit="instances", doc="fewest instances"),
    max=positive("int", required=True, unit="instances", example=400, doc="most instances"),
    max_step=non_negative("int", default=0, unit="instances",
                          doc="most instances one scaling adds or removes; 0: no limit"),
    scale_out_after=non_negative("duration", default=180.0,
                                 doc="its readings must have asked for more instances this long without a break "
                                     "before it adds any"),
    scale_in_after=non_negative("duration", default=900.0,
                                doc="its readings must have asked for fewer instances this long without a break "
                                    "before it removes any"),
    scale_out_cooldown=non_negative("duration", default=60.0, doc="least time between two scale-outs"),
    scale_in_cooldown=non_negative("duration", default=300.0, doc="least time between two scale-ins"),
    scale_in=Field("bool", default=True, doc="false: it never removes instances"),
    max_age=positive("duration", default=180.0, doc="a reading older than this is no reading"),
    lead_time=non_negative("duration", default=120.0,
                           doc="from an instance provisioned to it serving (boot, registration)"),
    provision=M("the control plane instances are asked of: one request each, across a path to a service of the "
                "world (its capacity, queue and health are the control plane's rate limits); unset: every instance "
                "asked for is provisioned at once",
                service=Field("str", required=True, example="provisioning",
                              doc="the service each instance is a request to"),
                path=_names("device pools a request crosses first", _POOL, ["network"]),
                timeout=positive("duration", default=10.0, doc="a request slower than this fails"),
                retry_delay=positive("duration", default=30.0,
                                     doc="wait after a failed request before the instance is asked for again")))

CONTROLLER = M(
    "a controller: the world's own automation that reacts to what monitoring delivers (never ground truth): an "
    "autoscaler, rules in the runbook grammar (their actions are mitigations, through the deployment tooling), or "
    "both",
    name=Field("name", required=True, example="web-autoscaler",
               doc="its name: journalled with what it does; effects target it by it"),
    description=Field("str", default="", example="scales the web tier on its CPU", doc="what it stands for"),
    enabled=Field("bool", default=True, doc="false: it starts switched off (an effect's op enable switches it on)"),
    autoscaler=AUTOSCALER,
    rules=L(RULE, doc="rules checked every tick, as a runbook's are; `done` counts this controller's own actions",
            default=list))

PLAYBOOK = M(
    "a playbook: the world of one scenario (clock, devices, services, populations, monitoring, deployment, status), "
    "what sets the incident off (triggers), what operators can do (mitigations), what a facilitator can inject "
    "(faults), and how runs are scored",
    name=Field("name", required=True, example="us-east-1-2021",
               doc="the playbook's name: its runbooks are looked up by it (runbooks/NAME/ beside the playbook), and runs "
                   "record it"),
    title=Field("str", required=True, example="AWS us-east-1, 2021-12-07: bridge congestion",
                doc="a one-line title"),
    description=Field("str", default="", example="At 07:30 a surge of new connections congests the bridge devices ...",
                      doc="what happens in the scenario and what the teams must do"),
    incident=Field("dict", default=dict,
                   example={"date": "2021-12-07", "timezone": "PST", "region": "us-east-1",
                            "summary": "Summary of the AWS Service Event in the Northern Virginia (US-EAST-1) Region"},
                   doc="the real incident it models (date, timezone, region, summary ...): free-form, for people; the "
                       "simulation does not read it"),
    clock=M("the simulated clock", required=True,
            start=Field("clock", default=0.0, example="07:00",
                        doc="the clock time of tick 0 (default midnight); triggers, par and runbook times are clock times"),
            tick=positive("duration", default=1.0,
                          doc="simulated seconds per tick (at most 60, and no longer than the clients' shortest "
                              "request or connect timeout); results converge as it shrinks"),
            duration=positive("duration", required=True, example="12h", doc="simulated time from start")),
    devices=L(DEVICE, doc="the bridge device pools traffic can cross", default=list),
    services=L(SERVICE, doc="the services", default=list),
    populations=L(POPULATION, doc="the client populations (their requests are what a run scores)", required=True,
                  min=1),
    monitoring=M("monitoring as the operators get it: every component's telemetry crosses a path before it reaches "
                 "their view; ground truth goes only to the journal (and, late, to log queries)", default=dict,
                 path=_names("device pools the telemetry reports cross; empty: out of band, never lost to congestion",
                             _POOL, ["bridge"]),
                 timeout=positive("duration", default=5.0, doc="a report slower than this across the path is lost"),
                 observe=_names("the metrics sent as telemetry and shown to the operators, as AGENT.METRIC",
                                "a metric, such as bridge.utilisation", ["bridge.utilisation", "dns-lookups.error_ratio"]),
                 stale_after=positive("duration", default=180.0,
                                      doc="a metric with no report for this long is not fresh (visibility, no_data "
                                          "alarms; above and below alarms do not fire on it, see when_stale); longer "
                                          "than telemetry_every plus timeout, or every value would go stale before "
                                          "its next report arrived"),
                 log_delay=positive("duration", default=600.0,
                                    doc="a log query (operation query_logs) is answered with ground truth this long "
                                        "after it was asked, whatever the path"),
                 publish_every=positive("duration", default=10.0,
                                        doc="how often the operators' view (values with their ages, firing alarms) is "
                                            "refreshed"),
                 telemetry_every=positive("duration", default=60.0,
                                          doc="how often every component reports its observed metrics"),
                 alarms=L(ALARM, doc="alarms on observed metrics", default=list)),
    deployment=M("deployment tooling: every mitigation with deploy: true runs its steps through it", default=dict,
                 path=_names("device pools each deployment step crosses; empty: never impaired", _POOL, ["bridge"]),
                 step_time=positive("duration", default=60.0,
                                    doc="how long a deployment step takes: after one gets through, the next (after "
                                        "the last, the effect) follows this much later"),
                 retry_delay=positive("duration", default=30.0, doc="wait after a failed step before it is tried again"),
                 target=Field("str", example="metadata",
                              doc="a service each step is a request to, after the path (administrative requests to "
                                  "the service they change): its queue and its health delay and fail steps too"),
                 timeout=positive("duration", default=10.0, doc="a step slower than this across the path fails")),
    status=M("the status dashboard: a customer update is posted only when its backend calls get through", default=dict,
             path=_names("device pools a post's backend calls cross; empty: posts always get through", _POOL, ["bridge"]),
             timeout=positive("duration", default=10.0, doc="a backend call slower than this across the path fails"),
             calls=positive("int", default=1, max=MOST_STEPPED, unit="calls", doc="backend calls one post needs, all of which must succeed"),
             retry_delay=positive("duration", default=30.0,
                                  doc="wait after a failed post (or failover attempt) before trying again"),
             failover=M("failing over to a standby when posting keeps failing; unset: never",
                        after=non_negative("duration", required=True, example="20m",
                                           doc="posting has failed for this long: try to fail over"),
                        path=_names("device pools the failover itself crosses; empty: it succeeds at once", _POOL,
                                    ["bridge"]),
                        standby_path=_names("device pools posts cross once on the standby; empty: they always get "
                                            "through", _POOL, ["standby-bridge"]))),
    triggers=L(M("a trigger: scheduled automation that applies its effects (the first one to fire, or the first "
                 "fault a facilitator injects, starts the scoring)",
                 name=Field("str", required=True, example="scaling-activity",
                            doc="the trigger's name (the operation disable on target triggers names it)"),
                 description=Field("str", default="", example="automated scaling makes internal clients reconnect",
                                   doc="what it stands for (journalled when it fires)"),
                 at=Field("clock", example="07:30",
                          doc="the clock time it first fires: at or after clock.start (a time the next day is 24:00 or "
                              "later); exactly one of at and when"),
                 when=Field("dict", example={"metric": "web.utilisation", "above": 0.9, "for": "5m"},
                            doc="instead of at: it first fires when this condition holds, read in the runbook "
                                "grammar's conditions (at, metric, no_data, alarm, all, any, not) on what monitoring "
                                "delivers (automation sees no ground truth either)"),
                 repeat_every=positive("duration", example="1h",
                                       doc="it fires again this often (on a condition: while the condition holds); "
                                           "unset: once"),
                 effects=L(EFFECT, doc="the operations it applies", required=True)),
               doc="what sets the incident off; a runbook's +DURATION times count from the earliest `at`", default=list),
    controllers=L(CONTROLLER, doc="the world's own automation that reacts to it (autoscalers, and rules in the "
                                  "runbook grammar), acting before, during and after the incident whatever the "
                                  "runbook; operators can switch one off (op disable) or change its autoscaler",
                  default=list),
    mitigations=L(M("a mitigation: an action operators can request (runbook or console)",
                    name=Field("str", required=True, example="add_capacity",
                               doc="the action's name (runbooks and consoles request it)"),
                    description=Field("str", default="", example="add devices to the main bridge pool",
                                      doc="what it does (shown to operators)"),
                    deploy=Field("bool", default=True,
                                 doc="it goes through the deployment tooling (its steps cross the deployment path); "
                                     "false: it takes effect once its lead time is over"),
                    steps=non_negative("int", default=1, max=MOST_STEPPED, unit="deployment steps",
                                       doc="deployment steps it needs (deploy: true only)"),
                    lead_time=non_negative("duration", default=0.0,
                                           doc="preparation (hardware, approvals) before the first step; 0: none"),
                    risk=Field("str", choices=("none", "low", "medium", "high"), default="low",
                               doc="a label shown to operators and in reports; it does not change the simulation"),
                    params=Field("dict", default=dict, example={"devices": 4},
                                 doc="its parameters with their defaults; a request can override them, and effects "
                                     "refer to them as $NAME"),
                    effects=L(EFFECT, doc="the operations applied when it takes effect; empty: it changes nothing",
                              default=list)),
                  doc="the catalogue of actions operators can request", default=list),
    faults=L(M("a fault a facilitator can inject during a live game day (the first injected, or the first trigger to "
               "fire, starts the scoring)", name=Field("str", required=True,
                                                                                      example="blind_monitoring",
                                                                                      doc="the fault's name"),
               description=Field("str", default="", example="the telemetry pipeline fails",
                                 doc="what it does (journalled when injected)"),
               params=Field("dict", default=dict, example={"seconds": 1800},
                            doc="its parameters with their defaults; the facilitator can override them, and effects "
                                "refer to them as $NAME"),
               effects=L(EFFECT, doc="the operations applied when it is injected", required=True)),
             doc="extra faults a facilitator can inject during a live game day", default=list),
    hints=L(M("a hint a facilitator can release to some or all teams during a live game day (teams see it on their "
              "consoles; it is journalled and in their reports' timelines)",
              name=Field("str", required=True, example="look_at_the_bridge", doc="the hint's name"),
              text=Field("str", required=True, example="Which of your dependencies cross the bridge?",
                         doc="what the teams are shown (at most 500 characters)")),
            doc="hints prepared for the facilitator of a live game day (a facilitator can also write one live)",
            default=list),
    scoring=M("how runs are scored, from ground truth; each milestone must first have been false after the trigger, "
              "then hold for its `hold` (it holds from the start of that window; failing again as long is a relapse)",
              default=dict,
              loop=M("when the loop counts as broken: over a sliding minute, every measure below that names "
                     "something is back within its bound, and no action holds back any of the demand that feeds it "
                     "(the populations below, or every population if it names none): within its bounds while an "
                     "action holds demand back, the loop is suspended, not broken (score.json's loop_suspended), "
                     "until the demand is back and the measures stay in bounds", default=dict,
                     devices=_names("device pools whose connection setups must succeed again (successful / offered "
                                    "setups at least setup_success_min)", _POOL, ["bridge"]),
                     populations=_names("populations whose retry amplification ((request + connection attempts) / "
                                        "fresh demand) must be at most amplification_max; for a durable population, "
                                        "attempts per request completed (ok + given up), since draining a backlog "
                                        "at full dispatch sends more than the fresh demand without any retry "
                                        "(attempts with none completed: unbounded)", "the name of a population",
                                        ["internal-clients"]),
                     services=_names("services whose work must be useful again (work_useful / work_done over the "
                                     "last minute at least useful_work_min, the minute's useful work counted at most "
                                     "its work done; a service that does no work counts as useful)",
                                     "the name of a service", ["droplet-manager"]),
                     setup_success_min=ratio(default=0.95, unit="share of setups (0-1)",
                                             doc="least share of the loop devices' setups that succeed"),
                     amplification_max=Field("number", min=1, default=1.5, unit="attempts per fresh request",
                                             doc="most attempts (requests and connections) per fresh request (per "
                                                 "request completed, for durable work); at least 1, since a world at "
                                                 "rest makes one attempt per fresh request"),
                     useful_work_min=ratio(default=0.9, unit="share of work (0-1)",
                                           doc="least share of the loop services' work done for a caller still waiting"),
                     hold=non_negative("duration", default=600.0, doc="how long the measures must hold")),
              healthy=M("when devices count as healthy", default=dict,
                        devices=_names("device pools that must be healthy; empty: loop.devices", _POOL,
                                       ["bridge", "bridge-dedicated"]),
                        utilisation_max=positive(default=0.85, unit="share of CPU (0-1)",
                                                 doc="most mean CPU utilisation of each pool over a minute"),
                        success_min=ratio(default=0.99, unit="success ratio (0-1)",
                                          doc="least mean request success x setup success of each pool over a minute"),
                        hold=non_negative("duration", default=600.0, doc="how long they must stay healthy")),
              backlog=M("when durable backlogs count as drained (back to steady state)", default=dict,
                        populations=_names("durable populations (at the start, or made so by a set_work effect) "
                                           "whose backlog must be at most `threshold` seconds of their arrivals "
                                           "(rate x clients)", "the name of a durable population",
                                           ["event-delivery"]),
                        services=_names("services whose work queue must be back to steady state (queue wait at most "
                                        "`threshold`)", "the name of a service with a queue", ["network-manager"]),
                        threshold=positive(default=60.0, unit="s",
                                           doc="seconds of arrivals (of queue wait, for a service) counted as steady "
                                               "state"),
                        hold=non_negative("duration", default=600.0, doc="how long they must stay drained")),
              recovered=M("recovery milestones, per population (success of its attempts) and per service "
                          "(its success ratio)", default=dict,
                          populations=_names("populations that must succeed again, all of their demand: ok / (ok + "
                                             "failed) attempts over a minute at least success_min, and none of their "
                                             "demand held back by an action (a scale_rate or scale_dispatch below 1, "
                                             "or a readmission under way, that an action set; a trigger's or "
                                             "fault's is demand falling); score.json's demand_restored says when "
                                             "the demand actions held back was all back",
                                             "the name of a population", ["dns-lookups"]),
                          services=_names("services that must answer what they are asked again: mean success ratio "
                                          "over a minute at least success_min, with useful work done if they were "
                                          "asked anything (idle and ready counts: without traffic its success ratio "
                                          "is its readiness)", "the name of a service", ["ec2-api"]),
                          success_min=ratio(default=0.95, unit="success ratio (0-1)", doc="least success to count"),
                          hold=non_negative("duration", default=300.0, doc="how long it must last")),
              impact=Field("dict", default=dict,
                           values=non_negative(unit="weight", doc="the weight of one error-minute of that population"),
                           example={"internal-clients": 1, "ec2-api-callers": 2},
                           doc="population name -> weight: the impact score is the weighted sum of the populations' "
                               "impaired minutes: each minute counts the share of the requests finished in it that "
                               "failed for good (error-minutes; for perishable work retried without limit, "
                               "retry.max_attempts 0, whose requests never fail for good, the share of its attempts "
                               "that failed, while it is so: a set_retry_policy or set_work during the run changes it "
                               "from then on; requests an action holds back, by a scale_rate below 1 or a readmission, "
                               "count as failed, wanted and never served, while a trigger or fault lowering the rate "
                               "models demand falling and costs nothing), and for durable work each tick in which its backlog "
                               "is above steady state (backlog.threshold seconds of its arrivals) counts whole; a "
                               "population left out does not count"),
              primary=Field("str", choices=tuple(PRIMARY), default=DEFAULT_PRIMARY, example="loop_broken",
                            doc="the outcome `gameday compare` ranks runbooks by, lower being better: "
                                + "; ".join(f"{k}, {v}" for k, v in PRIMARY.items())),
              indifference=positive(unit="the primary outcome's: weighted error-minutes for impact, seconds for times",
                                    example=120,
                                    doc="the smallest difference in the primary outcome worth telling apart: a "
                                        "comparison selects the best runbook at its confidence whenever the best "
                                        "beats the others by at least this much, and takes runbooks closer than "
                                        "this as equally good (default: "
                                        f"{DEFAULT_DELTA_SHARE:.0%} of the most a run can score: for impact the "
                                        "weights' sum x the run's minutes, for a time the run's duration)")),
    checks=L(CHECK, doc="checks on the score that `gameday check` gates on (a file beside the playbook can give them "
                        "instead: `gameday check --checks FILE`, a YAML file with this section alone)", default=list),
    par=Field("dict", default=dict, values=Field("clock", doc="when the historical response reached that measure"),
              example={"trigger": "07:30", "loop_broken": "13:34", "move_dns_off_bridge": "09:28"},
              doc="the historical response's times, as clock times: by measure (trigger, first_customer_update, "
                  "demand_restored, loop_broken, devices_healthy, backlog_drained, recovered:NAME) and by mitigation (when the real "
                  "team's action took effect); reports show each run beside them, the actions in the timeline"),
)

#: a file of checks beside a playbook (``gameday check --checks FILE``): the playbook's checks section alone
CHECKS_FILE = M("checks on the score, beside a playbook", checks=L(CHECK, required=True, doc="the checks"))

EMPTY_RUNBOOK = "name: none\ndescription: Nobody acts.\nrules: []\n"



@dataclass(frozen=True)
class Condition:
    """One kind of runbook condition: the key that names it, what that key holds, the other
    keys it takes (with types and defaults) and what it means."""
    holds: str  # conditions, condition, clock, metric, alarm, action
    doc: str
    example: str
    keys: dict = dfield(default_factory=dict)  # other key -> Field
    one_of: tuple = ()  # exactly one of these keys


_HOLD = non_negative("duration", default=0.0, unit="s",
                     doc="the condition must have held this long without a break before it counts (watched every tick "
                         "from the start of the run, inside `all` and `any` too, whatever the other conditions say; "
                         "a repeating rule's while it waits out `every`; a fork's new runbook's before it takes over)")

#: every runbook condition, by the key that names it; a condition has exactly one of these keys
CONDITIONS = {
    "all": Condition("conditions", "every condition of the list holds", "{all: [{alarm: edge-errors}, {at: \"08:00\"}]}"),
    "any": Condition("conditions", "at least one condition of the list holds", "{any: [{alarm: edge-errors}, {at: \"09:00\"}]}"),
    "not": Condition("condition", "the condition does not hold", "{not: {done: add-capacity}}"),
    "at": Condition("when", "the simulated clock has reached this time: a clock time, or +DURATION after the "
                    "playbook's first trigger (the earliest `at` of its triggers)", "{at: \"+15m\"}", {"for": _HOLD}),
    "no_data": Condition("metric", "the operators' view has had no fresh value of this metric for at least `for` "
                         "(telemetry is late or lost: the monitoring path is congested or down); a metric never seen "
                         "counts from the start of the run",
                         "{no_data: edge.setup_success, for: 5m}",
                         {"for": non_negative("duration", default=300.0, unit="s", doc="how old the last value must be")}),
    "metric": Condition("metric", "the operators' latest view of this metric is above or below a threshold; a value "
                        "older than `max_age` does not count", "{metric: edge.setup_success, below: 0.5, for: 2m}",
                        {"above": Field("number", example=0.9, doc="holds while the value is greater"),
                         "below": Field("number", example=0.5, doc="holds while the value is smaller"),
                         "for": _HOLD,
                         "max_age": non_negative("duration", default=300.0, unit="s",
                                                 doc="a value seen longer ago than this does not count")},
                        one_of=("above", "below")),
    "log": Condition("metric", "the latest answer to this operator's log queries (a mitigation applying query_logs "
                     "with reply_to: $requester; an answer arrives monitoring.log_delay after the query, with the "
                     "ground truth of then, independent of the live telemetry path) for this metric is above or "
                     "below a threshold; false until an answer has arrived",
                     "{log: edge.setup_success, below: 0.5}",
                     {"above": Field("number", example=0.9, doc="holds while the value is greater"),
                      "below": Field("number", example=0.5, doc="holds while the value is smaller")},
                     one_of=("above", "below")),
    "alarm": Condition("alarm", "this alarm of the playbook's monitoring is firing in the operators' view",
                       "{alarm: edge-errors, for: 1m}", {"for": _HOLD}),
    "done": Condition("action", "this operator requested this mitigation (or, with `effective`, it has taken effect) "
                      "at least `after` ago, counted from the first request", "{done: add-capacity, after: 10m}",
                      {"after": non_negative("duration", default=0.0, unit="s", doc="how long ago at least"),
                       "effective": Field("bool", default=False, doc="count from when it took effect, not from the request")}),
    "not_done": Condition("action", "this operator has not requested this mitigation", "{not_done: add-capacity}"),
}

RUNBOOK = M(
    "a runbook: a scripted operator whose rules (when -> do) are checked every tick against what the operators "
    "see (never ground truth)",
    name=Field("str", required=True, example="historical", doc="the runbook's name"),
    description=Field("str", default="", example="What AWS did on 2021-12-07, in order.",
                      doc="what the runbook does (for people)"),
    rules=L(RULE,
            doc="the rules, checked in order every tick", default=list),
)




def milestone_keys(data: dict) -> list[str]:
    """The milestones a playbook's scoring section gives its runs, as score.json and par name them."""
    sc = data["scoring"]
    out = ["loop_broken"]
    if sc["healthy"]["devices"] or sc["loop"]["devices"]:  # a world without devices (us-east-1-2025) has no such measure
        out.append("devices_healthy")
    if sc["backlog"]["populations"] or sc["backlog"]["services"]:
        out.append("backlog_drained")
    return out + [f"recovered:{p}" for p in [*sc["recovered"]["populations"], *sc["recovered"]["services"]]]
