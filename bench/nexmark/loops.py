"""Every Nexmark query as a plain Python loop over a list of events: the per-core ceiling the
benchmark (``bench/nexmark.py``) sets the DataStream programs of ``queries`` against.

``LOOPS[name](events, emit)`` walks the events (``generator.event_at``'s rows, in stream order)
once and calls ``emit(row)`` for every output row the query's job emits: the same rows
(updating queries: the same updates per key, whose last one per key is the SQL result; the
windowed queries fire a window once the bounded-out-of-orderness watermark passes its end, and
the rest when the input ends). State lives in dicts, with no framework between the steps; the
queries' own helpers (``euros``, ``day_of``, ``top_n_order`` ...) compute the values, so a
loop's rows equal the job's. The loops assume the events come in ``dateTime`` order (the
generator's default ``out_of_order_group_size`` of 1). q12 (processing-time windows) has no
reproducible answer and no loop.

Thread-safety: pure functions of their arguments.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List

from raylink.bench.nexmark.generator import AUCTION, BID, PERSON
from raylink.bench.nexmark.queries import (
    _CHANNEL_NUMBERS,
    _rank,
    bid_time_type,
    channel_id,
    day_of,
    euros,
    minute_of,
    side_input,
    top_n_order,
)

Emit = Callable[[tuple], Any]
#: the watermark's bound (``queries.watermark_strategy``)
_LATENESS = 4000


def loop_q0(evs: List[Any], emit: Emit) -> None:
    for e in evs:
        if e[0] == BID:
            b = e[3]
            emit((b[0], b[1], b[2], b[5], b[6]))


def loop_q1(evs: List[Any], emit: Emit) -> None:
    for e in evs:
        if e[0] == BID:
            b = e[3]
            emit((b[0], b[1], euros(b[2]), b[5], b[6]))


def loop_q2(evs: List[Any], emit: Emit) -> None:
    for e in evs:
        if e[0] == BID:
            b = e[3]
            if b[0] % 123 == 0:
                emit((b[0], b[2]))


def loop_q3(evs: List[Any], emit: Emit) -> None:
    people: Dict[int, Any] = {}  # id -> person in OR/ID/CA, or False
    waiting: Dict[int, list] = {}  # seller -> auction ids before the person
    for e in evs:
        kind = e[0]
        if kind == AUCTION:
            a = e[2]
            if a[8] == 10:
                person = people.get(a[7])
                if person is None:
                    waiting.setdefault(a[7], []).append(a[0])
                elif person is not False:
                    emit((person[1], person[4], person[5], a[0]))
        elif kind == PERSON:
            p = e[1]
            if p[5] in ("OR", "ID", "CA"):
                people[p[0]] = p
                for auction_id in waiting.pop(p[0], ()):
                    emit((p[1], p[4], p[5], auction_id))
            else:
                people[p[0]] = False
                waiting.pop(p[0], None)


def loop_q4(evs: List[Any], emit: Emit) -> None:
    auctions: Dict[int, Any] = {}
    best: Dict[int, int] = {}
    waiting: Dict[int, list] = {}
    maxes: Dict[int, Dict[int, int]] = {}  # category -> auction -> max
    totals: Dict[int, list] = {}  # category -> [sum of the maxes, auctions]

    def offer(a: Any, price: int, when: int) -> None:
        if a[5] <= when <= a[6]:
            previous = best.get(a[0])
            if previous is None or price > previous:
                best[a[0]] = price
                category = a[8]
                per = maxes.setdefault(category, {})
                total = totals.setdefault(category, [0, 0])
                old = per.get(a[0])
                if old is None:
                    total[1] += 1
                else:
                    total[0] -= old
                total[0] += price
                per[a[0]] = price
                emit((category, total[0] // total[1]))

    for e in evs:
        kind = e[0]
        if kind == BID:
            b = e[3]
            a = auctions.get(b[0])
            if a is None:
                waiting.setdefault(b[0], []).append((b[2], b[5]))
            else:
                offer(a, b[2], b[5])
        elif kind == AUCTION:
            a = e[2]
            auctions[a[0]] = a
            for price, when in waiting.pop(a[0], ()):
                offer(a, price, when)


def loop_q5(evs: List[Any], emit: Emit) -> None:
    windows: Dict[int, Dict[int, int]] = {}  # window start -> auction -> bids (in start order)

    def fire(start: int) -> None:
        counts = windows.pop(start)
        top = max(counts.values())
        for auction, num in counts.items():
            if num >= top:
                emit((auction, num))

    for e in evs:
        if e[0] != BID:
            continue
        b = e[3]
        when, auction = b[5], b[0]
        while windows:
            first = next(iter(windows))
            if first + 10_000 > when - _LATENESS:
                break
            fire(first)
        for start in range(when - when % 2000 - 8000, when + 1, 2000):  # oldest window first
            counts = windows.get(start)
            if counts is None:
                counts = windows[start] = {}
            counts[auction] = counts.get(auction, 0) + 1
    for start in list(windows):
        fire(start)


def loop_q7(evs: List[Any], emit: Emit) -> None:
    # window end -> [max price, bids of the window at that price, bids at exactly its start]
    windows: Dict[int, list] = {}

    def fire(end: int) -> None:
        top, at_top, _ = windows.pop(end)
        later = windows.get(end + 10_000)
        joined = at_top + [b for b in (later[2] if later else ()) if b[2] == top]
        for b in joined:
            emit((b[0], b[2], b[1], b[5], b[6]))

    for e in evs:
        if e[0] != BID:
            continue
        b = e[3]
        when, price = b[5], b[2]
        while windows:
            first = next(iter(windows))
            if first + 10_000 >= when - _LATENESS:  # the next window's bids at its start are in
                break
            fire(first)
        end = when - when % 10_000 + 10_000
        window = windows.get(end)
        if window is None:
            window = windows[end] = [price, [b], []]
        elif price > window[0]:
            window[0], window[1] = price, [b]
        elif price == window[0]:
            window[1].append(b)
        if when == end - 10_000:
            window[2].append(b)
    for end in list(windows):
        fire(end)


def loop_q8(evs: List[Any], emit: Emit) -> None:
    windows: Dict[int, Dict[int, list]] = {}  # window start -> id -> [names, sold]

    def fire(start: int) -> None:
        for pid, (names, sold) in windows.pop(start).items():
            if sold:
                for name in sorted(names):
                    emit((pid, name, start))

    for e in evs:
        kind = e[0]
        if kind == BID:
            continue
        when = e[4]
        while windows:
            first = next(iter(windows))
            if first + 10_000 > when - _LATENESS:
                break
            fire(first)
        start = when - when % 10_000
        window = windows.get(start)
        if window is None:
            window = windows[start] = {}
        if kind == PERSON:
            p = e[1]
            entry = window.get(p[0])
            if entry is None:
                entry = window[p[0]] = [set(), False]
            entry[0].add(p[1])
        else:
            seller = e[2][7]
            entry = window.get(seller)
            if entry is None:
                entry = window[seller] = [set(), False]
            entry[1] = True
    for start in list(windows):
        fire(start)


def loop_q9(evs: List[Any], emit: Emit) -> None:
    auctions: Dict[int, Any] = {}
    best: Dict[int, Any] = {}
    waiting: Dict[int, list] = {}

    def offer(a: Any, b: Any) -> None:
        if a[5] <= b[5] <= a[6]:
            current = best.get(a[0])
            if current is None or (-b[2], b[5]) < (-current[2], current[5]):
                best[a[0]] = b
                emit((*a, b[0], b[1], b[2], b[5], b[6]))

    for e in evs:
        kind = e[0]
        if kind == BID:
            b = e[3]
            a = auctions.get(b[0])
            if a is None:
                waiting.setdefault(b[0], []).append(b)
            else:
                offer(a, b)
        elif kind == AUCTION:
            a = e[2]
            auctions[a[0]] = a
            for b in waiting.pop(a[0], ()):
                offer(a, b)


def loop_q10(evs: List[Any], emit: Emit) -> None:
    for e in evs:
        if e[0] == BID:
            b = e[3]
            emit((b[0], b[1], b[2], b[5], b[6], day_of(b[5]), minute_of(b[5])))


def loop_q11(evs: List[Any], emit: Emit) -> None:
    sessions: Dict[int, list] = {}  # bidder -> [first, last, bids]
    for e in evs:
        if e[0] != BID:
            continue
        b = e[3]
        bidder, when = b[1], b[5]
        session = sessions.get(bidder)
        if session is None:
            sessions[bidder] = [when, when, 1]
        elif when <= session[1] + 10_000:  # [t, t + gap) windows that touch merge
            session[1] = when
            session[2] += 1
        else:
            emit((bidder, session[2], session[0], session[1] + 10_000))
            sessions[bidder] = [when, when, 1]
    for bidder, (first, last, count) in sessions.items():
        emit((bidder, count, first, last + 10_000))


def loop_q13(evs: List[Any], emit: Emit) -> None:
    lookup = side_input()
    for e in evs:
        if e[0] == BID:
            b = e[3]
            value = lookup.get(b[0] % 10_000)
            if value is not None:
                emit((b[0], b[1], b[2], b[5], value))


def loop_q14(evs: List[Any], emit: Emit) -> None:
    for e in evs:
        if e[0] == BID:
            b = e[3]
            if 1_000_000_000 < b[2] * 908 < 50_000_000_000:
                emit((b[0], b[1], euros(b[2]), bid_time_type(b[5]), b[5], b[6], b[6].count("c")))


def _daily(evs: List[Any], emit: Emit, per_channel: bool) -> None:
    groups: Dict[Any, list] = {}
    for e in evs:
        if e[0] != BID:
            continue
        b = e[3]
        when, price = b[5], b[2]
        key = (b[3], day_of(when)) if per_channel else (day_of(when),)
        minute = minute_of(when) if per_channel else None
        stats = groups.get(key)
        if stats is None:
            stats = groups[key] = [minute, [0, 0, 0, 0], [set(), set(), set(), set()], [set(), set(), set(), set()]]
        elif per_channel and minute > stats[0]:
            stats[0] = minute
        rank = _rank(price)
        counts, bidders, auctions = stats[1], stats[2], stats[3]
        counts[0] += 1
        counts[rank] += 1
        bidders[0].add(b[1])
        bidders[rank].add(b[1])
        auctions[0].add(b[0])
        auctions[rank].add(b[0])
        head = (*key, stats[0]) if per_channel else key
        emit((*head, *counts, *map(len, bidders), *map(len, auctions)))


def loop_q15(evs: List[Any], emit: Emit) -> None:
    _daily(evs, emit, False)


def loop_q16(evs: List[Any], emit: Emit) -> None:
    _daily(evs, emit, True)


def loop_q17(evs: List[Any], emit: Emit) -> None:
    groups: Dict[tuple, list] = {}
    for e in evs:
        if e[0] != BID:
            continue
        b = e[3]
        auction, day, price = b[0], day_of(b[5]), b[2]
        stats = groups.get((auction, day))
        if stats is None:
            stats = groups[(auction, day)] = [0, 0, 0, 0, price, price, 0]
        stats[0] += 1
        if price < 10_000:
            stats[1] += 1
        elif price < 1_000_000:
            stats[2] += 1
        else:
            stats[3] += 1
        if price < stats[4]:
            stats[4] = price
        if price > stats[5]:
            stats[5] = price
        stats[6] += price
        total, r1, r2, r3, low, high, amount = stats
        emit((auction, day, total, r1, r2, r3, low, high, amount // total, amount))


def loop_q18(evs: List[Any], emit: Emit) -> None:
    latest: Dict[tuple, int] = {}
    for e in evs:
        if e[0] == BID:
            b = e[3]
            key = (b[1], b[0])
            when = latest.get(key)
            if when is None or b[5] >= when:
                latest[key] = b[5]
                emit(tuple(b))


def loop_q19(evs: List[Any], emit: Emit) -> None:
    tops: Dict[int, list] = {}
    for e in evs:
        if e[0] != BID:
            continue
        row = tuple(e[3])
        top = tops.get(row[0]) or []
        if len(top) == 10 and top_n_order(row) >= top_n_order(top[-1]):
            continue
        ranked = sorted(top + [row], key=top_n_order)[:10]
        tops[row[0]] = ranked
        for rank, current in enumerate(ranked, 1):
            if rank > len(top) or top[rank - 1] != current:
                emit((*current, rank))


def loop_q20(evs: List[Any], emit: Emit) -> None:
    found: Dict[int, Any] = {}  # auction id -> category-10 auction, or False
    waiting: Dict[int, list] = {}
    for e in evs:
        kind = e[0]
        if kind == BID:
            b = e[3]
            a = found.get(b[0])
            if a is None:
                waiting.setdefault(b[0], []).append(b)
            elif a is not False:
                emit((b[0], b[1], b[2], b[3], b[4], b[5], b[6], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9]))
        elif kind == AUCTION:
            a = e[2]
            if a[8] != 10:
                found[a[0]] = False
                waiting.pop(a[0], None)
            else:
                found[a[0]] = a
                for b in waiting.pop(a[0], ()):
                    emit(
                        (b[0], b[1], b[2], b[3], b[4], b[5], b[6], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9])
                    )


def loop_q21(evs: List[Any], emit: Emit) -> None:
    for e in evs:
        if e[0] == BID:
            b = e[3]
            known = _CHANNEL_NUMBERS.get(b[3].lower())
            if known is not None:
                emit((b[0], b[1], b[2], b[3], known))
            else:
                extracted = channel_id(b[4])
                if extracted is not None:
                    emit((b[0], b[1], b[2], b[3], extracted))


def loop_q22(evs: List[Any], emit: Emit) -> None:
    for e in evs:
        if e[0] == BID:
            b = e[3]
            parts = b[4].split("/")
            n = len(parts)
            emit(
                (
                    b[0],
                    b[1],
                    b[2],
                    b[3],
                    parts[3] if n > 3 else None,
                    parts[4] if n > 4 else None,
                    parts[5] if n > 5 else None,
                )
            )


LOOPS: Dict[str, Callable[[List[Any], Emit], None]] = {
    name[len("loop_") :]: function for name, function in sorted(globals().items()) if name.startswith("loop_q")
}

__all__ = ["LOOPS"]
