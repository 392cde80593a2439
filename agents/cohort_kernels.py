"""The cohort model's compiled kernels (``agents.compiled``): spreading a cohort over a
timing wheel, and what a population does with a batch's result (``Population._on_result``)
and the steps it shares with the rest of its tick.

They live in one file because numba caches a kernel under its own file's time stamp: a
kernel calling a kernel of another file would not be recompiled when that one changes.

A population's numbers cross into a kernel as int64 arrays; their layouts are named here
once (``ST_*``: the population's counters, ``RES_*``: the tick's result counts, ``WHEEL_*``:
its three wheels, ``IN_*``: a result and the batch it settles, ``OUT_*``: what ``settle``
hands back; ``SETTLE_*``: where each part lies in the one array ``settle`` takes, since
building an array costs more than the kernel's whole arithmetic). Delays come from a
``wheel.DelayStore``: its arrays and, per delay, the index of a pack of tables.
"""
from __future__ import annotations

import math

import numpy as np

from agents.compiled import binomial, hypergeometric, kernel, multinomial_into, split_into

# the population's counters (in and out)
ST_CONNECTED, ST_PENDING_CLOSES, ST_ORPHANS_BACK, ST_RELEASED_BY = range(4)
# the tick's result counts (added to)
RES_OK, RES_FAILED, RES_ERRORS, RES_SETUP_OK, RES_SETUP_FAILED, RES_AT_ONCE = range(6)
RES_KEYS = ("ok", "failed", "errors", "setup_ok", "setup_failed", "at_once")  # in that order
# the wheels: positions (in) and entries pending (in and out)
WHEEL_CONN, WHEEL_REQ, WHEEL_ORPHAN = range(3)
# a result and its batch (in)
(IN_S_OK, IN_S_REJ, IN_R_OK, IN_R_REJ, IN_R_FULL, IN_RENEWALS, IN_RENEW_FAILED, IN_CLIENTS, IN_POOLED, IN_DURABLE,
 IN_ON_TIMEOUT, IN_ON_REJECT, IN_REFUSAL_AT_ONCE, IN_MAX_ATTEMPTS, IN_BUG, IN_RELEASED, IN_RELEASED_BY, IN_SENDERS,
 IN_HOLDING, IN_CONN_CLASSES, IN_REQ_CLASSES) = range(21)
# the delays a result may need, as packs of the store (-1: none; a population that holds no
# connections needs only the retry policy's from the send and from the request timeout)
(LAG_CONN, LAG_CONN_CT, LAG_CONN_RT, LAG_RETRY, LAG_RETRY_RT, LAG_RETRY_NOW) = range(6)
# handed back: connections left (for Population._left, which the caller applies), the successes
OUT_LOST, OUT_LOST_POOL, OUT_DROPPED, OUT_DROPPED_POOL, OUT_GOOD = range(5)
# settle's array: IN_*, then ST_*, the wheels' pending and positions, RES_*, OUT_*, then (from
# SETTLE_HEAD) the lists: connected clients by class, parked retries, released retries, the
# batch's connection attempts and its requests
SETTLE_ST = IN_REQ_CLASSES + 1
SETTLE_PENDING = SETTLE_ST + 4
SETTLE_POS = SETTLE_PENDING + 3
SETTLE_RES = SETTLE_POS + 3
SETTLE_OUT = SETTLE_RES + len(RES_KEYS)
SETTLE_HEAD = SETTLE_OUT + 5


@kernel
def spread(draws, slots, pos, per_class, shift, first_row, probs, offsets, firsts, spans, counts):
    """``TimingWheel.spread`` on the wheel's ``slots`` at ``pos``; returns the entries
    scheduled. A class past the last merges into it; an offset past the wheel lands on
    its last slot; a padded row's padding holds what numpy's multinomial leaves there (all
    but the last padded slot empty, that one what rounding kept from the last real
    slot), which belongs to the last real slot."""
    classes, size = slots.shape
    width = probs.shape[1]
    total = 0
    for k in range(len(per_class)):
        n = per_class[k]
        if n == 0:
            continue
        r = k - first_row
        row = slots[min(k + shift, classes - 1)]
        total += n
        if width == 1:  # one slot: no draw
            row[(pos + min(offsets[r, 0], size - 1)) % size] += n
            continue
        multinomial_into(draws, n, probs[r], counts)
        span = spans[r]
        if span == 0 or firsts[r] + span > size - 1:  # slot by slot
            for i in range(width):
                row[(pos + min(offsets[r, i], size - 1)) % size] += counts[i]
        else:  # a run of slots, then padding
            a = (pos + firsts[r]) % size
            for i in range(span):
                row[(a + i) % size] += counts[i]
            if width > span:
                row[(a + span - 1) % size] += counts[width - 1]
    return total


@kernel
def schedule(draws, slots, pos, per_class, shift, ignore_backoff, probs, offsets, row_start, row_width, row_first,
             row_span, packs, counts, pack):
    """Entries of attempt class k (``per_class``) scheduled as class k + shift on a wheel
    (``slots`` at ``pos``) after the delays of ``pack``: one multinomial draw per class,
    over that class's own delay when only one class has entries, else over the pack's
    table of them all (padded to one width); with ``ignore_backoff`` (the latent bug)
    all at the bug's one slot. Returns the entries scheduled."""
    classes, size = slots.shape
    if pack < 0:  # a pack the caller did not expect to be needed (Population._lags)
        if per_class.sum():
            raise ValueError("schedule: no delays given for these entries")
        return 0
    if pack >= len(packs):  # the store's arrays were read before the pack was made (compiled code checks no index)
        raise ValueError("schedule: a pack the store's arrays do not hold")
    full0, single0, bug_first, n_rows = packs[pack, 0], packs[pack, 1], packs[pack, 2], packs[pack, 3]
    total = 0
    if ignore_backoff:
        col = (pos + min(bug_first, size - 1)) % size
        for k in range(len(per_class)):
            n = per_class[k]
            if n:  # shifted past the last class they merge into it
                slots[min(k + shift, classes - 1), col] += n
                total += n
        return total
    busy, row = 0, -1
    for k in range(len(per_class)):
        if per_class[k]:
            busy += 1
            if row < 0:
                row = k
    if busy == 0:
        return 0
    if busy == 1:
        r = single0 + row
        s, w = row_start[r], row_width[r]
        return spread(draws, slots, pos, per_class, shift, row, probs[s:s + w].reshape((1, w)),
                      offsets[s:s + w].reshape((1, w)), row_first[r:r + 1], row_span[r:r + 1], counts)
    s, w = row_start[full0], row_width[full0]
    return spread(draws, slots, pos, per_class, shift, 0, probs[s:s + n_rows * w].reshape((n_rows, w)),
                  offsets[s:s + n_rows * w].reshape((n_rows, w)), row_first[full0:full0 + n_rows],
                  row_span[full0:full0 + n_rows], counts)


@kernel
def split(draws, counts, ok):
    """(good, bad): ``ok`` of ``counts`` (by class) drawn without replacement, and the rest."""
    good = np.zeros(len(counts), dtype=np.int64)
    total = 0
    for c in counts:
        total += c
    ok = min(ok, total)
    if ok == total:
        good[:] = counts
    elif ok > 0:
        split_into(draws, counts, ok, good)
    return good, counts - good


@kernel
def take_connected(draws, conn, st, n):
    """Remove ``n`` connected clients (at most all), drawn at random over the back-off
    classes of ``conn``; returns them by class."""
    n = min(n, st[ST_CONNECTED])
    taken = np.zeros(len(conn), dtype=np.int64)
    if n <= 0:
        return taken
    split_into(draws, conn, n, taken)
    conn -= taken
    st[ST_CONNECTED] -= n
    return taken


@kernel
def owners_left(draws, st, n, pool):
    """``n`` of ``pool`` connected clients lost their connections, owners of orphan retries alike."""
    if st[ST_ORPHANS_BACK] and n > 0 and pool > 0:
        st[ST_ORPHANS_BACK] -= binomial(draws, st[ST_ORPHANS_BACK], min(1.0, n / pool))


@kernel
def retry_or_give_up(draws, failed, orphan, max_attempts, durable, res, pending, pos, req_slots, orphan_slots,
                     probs, offsets, row_start, row_width, row_first, row_span, packs, counts, pack):
    """Failed attempts of class k retry as class k + 1 (after the retry policy's delays,
    ``pack``) unless their attempts are exhausted (perishable work); ``orphan``: their
    client dropped its connection, so the retry waits for its next one (the orphan wheel)."""
    failed = failed.copy()
    if max_attempts and not durable:
        gone = failed[max_attempts - 1:].sum()
        if gone:
            res[RES_ERRORS] += gone
            failed[max_attempts - 1:] = 0
    if failed.sum() == 0:
        return
    w = WHEEL_ORPHAN if orphan else WHEEL_REQ
    pending[w] += schedule(draws, orphan_slots if orphan else req_slots, pos[w], failed, 1, False, probs, offsets,
                           row_start, row_width, row_first, row_span, packs, counts, pack)


@kernel
def settle(draws, given, conn_slots, req_slots, orphan_slots, lags, probs, offsets, row_start, row_width, row_first,
           row_span, packs, counts):
    """``Population._on_result`` once the batch is found and its renewals settled: the
    connection attempts' outcomes (clients connect, or back off and try again), then the
    requests' (successes prove connections; failures are retried or given up, and make
    their senders drop their connections). ``given`` is laid out as SETTLE_* says; its
    counters, pending counts, result counts, outputs and lists are updated in place."""
    st, res, out = given[SETTLE_ST:SETTLE_PENDING], given[SETTLE_RES:SETTLE_OUT], given[SETTLE_OUT:SETTLE_HEAD]
    pending, pos = given[SETTLE_PENDING:SETTLE_POS], given[SETTLE_POS:SETTLE_RES]
    cc, rc = given[IN_CONN_CLASSES], given[IN_REQ_CLASSES]
    o = SETTLE_HEAD
    conn, parked, released = given[o:o + cc], given[o + cc:o + cc + rc], given[o + cc + rc:o + cc + 2 * rc]
    o += cc + 2 * rc
    batch_conn, batch_req = given[o:o + cc], given[o + cc:o + cc + rc]
    pooled, durable, bug = given[IN_POOLED] != 0, given[IN_DURABLE] != 0, given[IN_BUG] != 0
    max_attempts, clients = given[IN_MAX_ATTEMPTS], given[IN_CLIENTS]
    on_timeout, on_reject = given[IN_ON_TIMEOUT] != 0, given[IN_ON_REJECT] != 0
    store = (probs, offsets, row_start, row_width, row_first, row_span, packs, counts)
    n_conn, n_req = batch_conn.sum(), batch_req.sum()
    renewals, renew_failed = given[IN_RENEWALS], given[IN_RENEW_FAILED]
    if pooled and (n_conn or renew_failed):
        good, bad = split(draws, batch_conn, min(given[IN_S_OK], n_conn))
        s_ok_good = good.sum()
        n_bad = n_conn - s_ok_good
        _owners_connect(draws, s_ok_good, n_bad, clients - st[ST_CONNECTED], parked, released, st, res, pending, pos,
                        req_slots, orphan_slots, max_attempts, durable, store, lags[LAG_RETRY_NOW])
        conn += good
        st[ST_CONNECTED] += s_ok_good
        res[RES_SETUP_OK] += s_ok_good + renewals - renew_failed
        res[RES_SETUP_FAILED] += n_bad + renew_failed
        if renew_failed:  # the old connection is gone and the new one failed: a failed connection attempt
            pool = st[ST_CONNECTED]
            lost = take_connected(draws, conn, st, renew_failed)
            n_lost = lost.sum()
            out[OUT_LOST], out[OUT_LOST_POOL] = n_lost, pool
            owners_left(draws, st, n_lost, pool)
            bad = bad + lost
            n_bad += n_lost
        if n_bad:
            fast, slow = split(draws, bad, min(given[IN_S_REJ], n_bad))
            pending[WHEEL_CONN] += schedule(draws, conn_slots, pos[WHEEL_CONN], fast, 1, bug, *store, lags[LAG_CONN])
            pending[WHEEL_CONN] += schedule(draws, conn_slots, pos[WHEEL_CONN], slow, 1, bug, *store,
                                            lags[LAG_CONN_CT])
    if not n_req:
        return
    good, bad = split(draws, batch_req, min(given[IN_R_OK], n_req))
    n_good = good.sum()
    res[RES_OK] += n_good
    out[OUT_GOOD] = n_good
    senders = given[IN_SENDERS]
    # Of the clients connected when the batch was sent, those still on that connection.
    holding = min(st[ST_CONNECTED], given[IN_HOLDING])
    if pooled and n_good and st[ST_CONNECTED] > conn[0]:
        # Clients with a successful request have proven their connection: back-off resets.
        proven = binomial(draws, holding, 1.0 - math.exp(-n_good / max(1, senders)))
        take_connected(draws, conn, st, proven)
        conn[0] += proven
        st[ST_CONNECTED] += proven
    n_bad = n_req - n_good
    res[RES_FAILED] += n_bad
    if not n_bad:
        return
    rej = min(given[IN_R_REJ], n_bad)
    fast, slow = split(draws, bad, rej)
    if given[IN_R_FULL] and given[IN_REFUSAL_AT_ONCE] != 0:
        # Refused by a full queue: a retry sent at once meets it still full, and is refused
        # again until the attempts run out (the round trip of a tick would otherwise let it
        # in later, when the queue has drained).
        shut, fast = split(draws, fast, min(given[IN_R_FULL], rej))
        _attempts_at_once(draws, shut, res, max_attempts)
    drops = pooled and not durable  # a failure can make the client drop its connection
    retry_or_give_up(draws, fast, drops and on_reject, max_attempts, durable, res, pending, pos, req_slots,
                     orphan_slots, *store, lags[LAG_RETRY])
    retry_or_give_up(draws, slow, drops and on_timeout, max_attempts, durable, res, pending, pos, req_slots,
                     orphan_slots, *store, lags[LAG_RETRY_RT])
    n_slow = n_bad - rej
    fails = (n_slow if on_timeout else 0) + (rej if on_reject else 0)
    if pooled and holding and fails:
        # Senders that saw at least one failure (Poisson occupancy of failures over senders);
        # retries released by new connections all came from the few clients that made them.
        b_released = given[IN_RELEASED]
        by = min(given[IN_RELEASED_BY], senders)
        # their requests: the released retries and their share of the others
        theirs = b_released + round((n_req - b_released) * by / max(1, senders)) if by else 0
        if theirs and fails < n_req:
            rel_fails = hypergeometric(draws, theirs, n_req - theirs, fails)
        else:
            rel_fails = min(fails, theirs) if theirs else 0
        rel_holding = min(holding, by)  # new on their connections: no earlier result dropped them
        n_drop = binomial(draws, rel_holding, 1.0 - math.exp(-rel_fails / by)) if rel_fails else 0
        p = 1.0 - math.exp(-(fails - rel_fails) / max(1, senders - by))
        n_drop += binomial(draws, holding - rel_holding, p)
        pool = st[ST_CONNECTED]
        dropped = take_connected(draws, conn, st, n_drop)
        n_dropped = dropped.sum()
        out[OUT_DROPPED], out[OUT_DROPPED_POOL] = n_dropped, pool
        owners_left(draws, st, n_dropped, pool)
        st[ST_PENDING_CLOSES] += n_dropped
        # The client reconnects once it has noticed the failure (after the timeout).
        lag = lags[LAG_CONN_RT] if n_slow and on_timeout else lags[LAG_CONN]
        # A proven client starts its back-off afresh; one that never proved its
        # connection carries on from the attempt it connected on.
        first = np.zeros(len(dropped), dtype=np.int64)
        first[0], dropped[0] = dropped[0], 0
        pending[WHEEL_CONN] += schedule(draws, conn_slots, pos[WHEEL_CONN], first, 0, bug, *store, lag)
        pending[WHEEL_CONN] += schedule(draws, conn_slots, pos[WHEEL_CONN], dropped, 1, bug, *store, lag)


@kernel
def _owners_connect(draws, ok, failed, disconnected, parked, released, st, res, pending, pos, req_slots, orphan_slots,
                    max_attempts, durable, store, lag):
    """``ok`` of the ``disconnected`` clients got a connection and ``failed`` of them failed
    to get one: parked retries go out with their client's connection or fail with it, and
    owners of retries not yet due are connected again."""
    if disconnected <= 0 or not (ok or failed):
        return
    q_ok = min(1.0, ok / disconnected)
    q_fail = min(1.0 - q_ok, failed / disconnected)
    waiting = pending[WHEEL_ORPHAN] - st[ST_ORPHANS_BACK]
    if ok and waiting > 0:
        st[ST_ORPHANS_BACK] += binomial(draws, waiting, q_ok)
    if parked.sum() == 0:
        return
    # one multinomial draw per attempt class over (goes out, fails, waits on)
    outcomes = np.array([q_ok, q_fail, max(0.0, 1.0 - q_ok - q_fail)])
    drawn = np.zeros(3, dtype=np.int64)
    lost = np.zeros(len(parked), dtype=np.int64)
    going = 0
    for k in range(len(parked)):
        if parked[k]:
            multinomial_into(draws, parked[k], outcomes, drawn)
            released[k] += drawn[0]
            lost[k] = drawn[1]
            parked[k] -= drawn[0] + drawn[1]
            going += drawn[0]
    st[ST_RELEASED_BY] += min(ok, going)
    if lost.sum():
        res[RES_FAILED] += lost.sum()
        retry_or_give_up(draws, lost, True, max_attempts, durable, res, pending, pos, req_slots, orphan_slots,
                         *store, lag)


@kernel
def _attempts_at_once(draws, refused, res, max_attempts):
    """Requests of attempt class k refused by a full queue, whose every remaining attempt
    is refused at once: they fail for good, and their attempts count."""
    n = refused.sum()
    if not n:
        return
    extra = 0
    for k in range(len(refused)):
        extra += refused[k] * max(max_attempts - 1 - k, 0)
    res[RES_ERRORS] += n
    res[RES_FAILED] += extra
    res[RES_AT_ONCE] += extra
