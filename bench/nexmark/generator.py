"""Nexmark's event generator (Flink nexmark's ``GeneratorConfig`` / ``NexmarkGenerator`` and the
``PersonGenerator``, ``AuctionGenerator``, ``BidGenerator``, ``PriceGenerator``,
``StringsGenerator`` and ``LongGenerator`` model generators), as pure functions of the event index.

Event ``k`` (0-based, over the whole stream) is computed from ``k`` and the ``NexmarkConfig``
alone, so any subset of indices can be generated anywhere, in any order, at any parallelism:

* event number ``first_event_number + k``; with ``out_of_order_group_size`` ``n`` > 1 it is
  permuted inside its group of ``n`` (``base + number * 953 % n``, Nexmark's
  ``nextAdjustedEventNumber``): bounded out-of-orderness of at most ``n - 1`` events;
* event id ``first_event_id + adjusted number``; ``id % 50`` picks the kind
  (person:auction:bid = 1:3:46 by default, ``*_proportion``);
* ``dateTime = base_time + int(adjusted number * inter_event_delay_us) // 1000`` with
  ``inter_event_delay_us = 1e6 / events_per_second * num_event_generators``;
* person ids are ``lastBase0PersonId + 1000``, auction ids ``lastBase0AuctionId + 1000``;
  sellers, bidders and bid auctions are "hot" (a multiple of 100 below the newest id) with
  probability ``1 - 1/hot_*_ratio``, else drawn among the active persons / in-flight auctions
  (plus a lead of 10 ids that do not exist yet), as Nexmark does. Nexmark's ``BidGenerator``
  adds ``FIRST_PERSON_ID`` to a bidder twice (bidders are ``base0 + 2000``); kept as it is.

Randomness: every event draws from its own ``SplittableRandom(seed + event id)``, a port of
``java.util.SplittableRandom`` (the class Nexmark's generators take; equal to Java's for a
seed), so an event is a function of its id as in Beam's Nexmark (which seeds a
``java.util.Random`` per event id: consecutive seeds give that LCG correlated first draws,
hence SplittableRandom's mixing here). Flink nexmark draws from one unseeded
``SplittableRandom`` per generator, so its values differ on every run and cannot be
reproduced: the structure (ids, proportions, hot ratios, timestamps, string lengths, price
distribution, channels, the order of the draws) is Nexmark's, the values this generator's.

Flink's ``GeneratorConfig.split(n)`` gives each source subtask its own timeline (every split
starts at event number ``firstEventNumber``, so timestamps repeat across splits and the events
depend on the parallelism); here the stream is one timeline whatever the parallelism.

Thread-safety: the functions are pure; ``NexmarkConfig`` is frozen.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Dict, Iterable, Iterator, List, Optional

from raylink.core.row import make_row

FIRST_AUCTION_ID = 1000
FIRST_PERSON_ID = 1000
FIRST_CATEGORY_ID = 10
NUM_CATEGORIES = 5
PERSON_ID_LEAD = 10
AUCTION_ID_LEAD = 10
HOT_SELLER_RATIO = 100
HOT_AUCTION_RATIO = 100
HOT_BIDDER_RATIO = 100
HOT_CHANNELS_RATIO = 2
CHANNELS_NUMBER = 10_000
HOT_CHANNELS = ("Google", "Facebook", "Baidu", "Apple")
US_STATES = ("AZ", "CA", "ID", "OR", "WA", "WY")
US_CITIES = (
    "Phoenix",
    "Los Angeles",
    "San Francisco",
    "Boise",
    "Portland",
    "Bend",
    "Redmond",
    "Seattle",
    "Kent",
    "Cheyenne",
)
FIRST_NAMES = ("Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah", "Deiter", "Walter")
LAST_NAMES = ("Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones", "Noris")
MIN_STRING_LENGTH = 3
_REUSABLE_EXTRA_LENGTH = 1024 * 1024

#: the event row's fields (Flink nexmark's ``datagen`` table, ``dateTime`` its computed column)
EVENT_FIELDS = ["event_type", "person", "auction", "bid", "dateTime"]
PERSON_FIELDS = ["id", "name", "emailAddress", "creditCard", "city", "state", "dateTime", "extra"]
AUCTION_FIELDS = [
    "id",
    "itemName",
    "description",
    "initialBid",
    "reserve",
    "dateTime",
    "expires",
    "seller",
    "category",
    "extra",
]
BID_FIELDS = ["auction", "bidder", "price", "channel", "url", "dateTime", "extra"]
PERSON, AUCTION, BID = 0, 1, 2

_MASK64 = (1 << 64) - 1
_GOLDEN_GAMMA = 0x9E3779B97F4A7C15
_LONG_MAX = (1 << 63) - 1
_INT_MAX = (1 << 31) - 1


class SplittableRandom:
    """``java.util.SplittableRandom`` (the generator Nexmark draws from): for a seed, the same
    ``nextInt()``, ``nextInt(bound)``, ``nextLong()`` and ``nextDouble()`` as Java's."""

    __slots__ = ("seed",)

    def __init__(self, seed: int) -> None:
        self.seed = seed & _MASK64

    def next_int(self, bound: Optional[int] = None) -> int:
        seed = self.seed = (self.seed + _GOLDEN_GAMMA) & _MASK64
        z = ((seed ^ (seed >> 33)) * 0x62A9D9ED799705F5) & _MASK64
        r = (((z ^ (z >> 28)) * 0xCB24D0A5C88C35B3) & _MASK64) >> 32  # mix32, unsigned
        if bound is None:
            return r - (1 << 32) if r >= 1 << 31 else r
        if bound <= 0:
            raise ValueError(f"bound must be positive, got {bound}")
        m = bound - 1
        if bound & m == 0:
            return r & m
        u = r >> 1
        while True:
            r = u % bound
            if u + m - r <= _INT_MAX:  # Java: no int overflow
                return r
            u = (self.next_int() & 0xFFFFFFFF) >> 1

    def next_long(self) -> int:
        value = self._next_long_unsigned()
        return value - (1 << 64) if value > _LONG_MAX else value

    def _next_long_unsigned(self) -> int:
        z = self.seed = (self.seed + _GOLDEN_GAMMA) & _MASK64
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
        return z ^ (z >> 31)

    def next_double(self) -> float:
        return (self._next_long_unsigned() >> 11) * (1.0 / (1 << 53))


@dataclass(frozen=True)
class NexmarkConfig:
    """Flink nexmark's ``NexmarkConfiguration`` fields that shape the events (same defaults).

    ``events``: how many events the stream has (None: unbounded). ``events_per_second``
    (``firstEventRate``) spaces the ``dateTime``s; ``max_emit_speed`` False makes the source
    emit each event at its wall-clock time (the rate), True as fast as it can."""

    events: Optional[int] = None
    events_per_second: int = 10_000
    num_event_generators: int = 1
    person_proportion: int = 1
    auction_proportion: int = 3
    bid_proportion: int = 46
    avg_person_byte_size: int = 200
    avg_auction_byte_size: int = 500
    avg_bid_byte_size: int = 100
    hot_auction_ratio: int = 2
    hot_sellers_ratio: int = 4
    hot_bidders_ratio: int = 4
    num_in_flight_auctions: int = 100
    num_active_people: int = 1000
    out_of_order_group_size: int = 1
    first_event_id: int = 0
    first_event_number: int = 0
    base_time: int = 0
    seed: int = 0
    max_emit_speed: bool = True

    def __post_init__(self) -> None:
        positive = (
            "events_per_second",
            "num_event_generators",
            "person_proportion",
            "auction_proportion",
            "bid_proportion",
            "hot_auction_ratio",
            "hot_sellers_ratio",
            "hot_bidders_ratio",
            "num_in_flight_auctions",
            "num_active_people",
            "out_of_order_group_size",
        )
        for name in positive:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"NexmarkConfig.{name} must be a positive integer, got {value!r}")
        if self.events is not None and (not isinstance(self.events, int) or self.events < 0):
            raise ValueError(f"NexmarkConfig.events must be None or an integer >= 0, got {self.events!r}")
        for name in ("first_event_id", "first_event_number", "base_time"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 0:
                raise ValueError(f"NexmarkConfig.{name} must be an integer >= 0, got {getattr(self, name)!r}")

    @property
    def total_proportion(self) -> int:
        return self.person_proportion + self.auction_proportion + self.bid_proportion

    @property
    def inter_event_delay_us(self) -> float:
        return 1000000.0 / self.events_per_second * self.num_event_generators

    @property
    def max_events(self) -> int:
        """``events``, or Nexmark's bound for an unbounded generator (``maxEventsOrZero == 0``)."""
        if self.events is not None:
            return self.events
        biggest = max(self.avg_person_byte_size, self.avg_auction_byte_size, self.avg_bid_byte_size)
        return _LONG_MAX // (self.total_proportion * biggest)

    def timestamp_for_event(self, event_number: int) -> int:
        """``GeneratorConfig.timestampForEvent``: the event time (epoch ms) of an event number."""
        return self.base_time + int(event_number * self.inter_event_delay_us) // 1000

    def adjusted_event_number(self, index: int) -> int:
        """``nextAdjustedEventNumber``: event ``index``'s number after the out-of-order permutation."""
        n = self.out_of_order_group_size
        number = self.first_event_number + index
        return (number // n) * n + (number * 953) % n

    def watermark_for_event(self, index: int) -> int:
        """``nextEventNumberForWatermark``'s time: no event at or after ``index`` is older."""
        n = self.out_of_order_group_size
        return self.timestamp_for_event(((self.first_event_number + index) // n) * n)


# -- ids ---------------------------------------------------------------------------------------
def last_base0_person_id(config: NexmarkConfig, event_id: int) -> int:
    """The newest person id (base 0) at ``event_id``."""
    epoch, offset = divmod(event_id, config.total_proportion)
    if offset >= config.person_proportion:
        offset = config.person_proportion - 1
    return epoch * config.person_proportion + offset


def last_base0_auction_id(config: NexmarkConfig, event_id: int) -> int:
    """The newest auction id (base 0) at ``event_id``."""
    epoch, offset = divmod(event_id, config.total_proportion)
    if offset < config.person_proportion:
        epoch -= 1
        offset = config.auction_proportion - 1
    elif offset >= config.person_proportion + config.auction_proportion:
        offset = config.auction_proportion - 1
    else:
        offset -= config.person_proportion
    return epoch * config.auction_proportion + offset


def _next_long(random: SplittableRandom, n: int) -> int:
    """``LongGenerator.nextLong``: uniform in ``[0, n)``."""
    if n < _INT_MAX:
        return random.next_int(n)
    return abs(random.next_long()) % n  # Math.abs(nextLong() % n): Java's % keeps the dividend's sign


def next_base0_person_id(config: NexmarkConfig, event_id: int, random: SplittableRandom) -> int:
    """A person among the active ones (and ``PERSON_ID_LEAD`` not yet born)."""
    num_people = last_base0_person_id(config, event_id) + 1
    active = min(num_people, config.num_active_people)
    return num_people - active + _next_long(random, active + PERSON_ID_LEAD)


def next_base0_auction_id(config: NexmarkConfig, event_id: int, random: SplittableRandom) -> int:
    """An auction among the in-flight ones (and ``AUCTION_ID_LEAD`` not yet opened)."""
    max_auction = last_base0_auction_id(config, event_id)
    min_auction = max(max_auction - config.num_in_flight_auctions, 0)
    return min_auction + _next_long(random, max_auction - min_auction + 1 + AUCTION_ID_LEAD)


def next_price(random: SplittableRandom) -> int:
    """``PriceGenerator.nextPrice``: 10^[0, 6) dollars in cents, rounded as Java's Math.round."""
    return int(10.0 ** (random.next_double() * 6.0) * 100.0 + 0.5)


# -- strings -----------------------------------------------------------------------------------
_LETTERS = "abcdefghijklmnopqrstuvwxyz"


def next_string(random: SplittableRandom, max_length: int, special: str = " ") -> str:
    """``StringsGenerator.nextString``: 3..max_length-1 letters, 1 in 13 the special one, trimmed."""
    length = MIN_STRING_LENGTH + random.next_int(max_length - MIN_STRING_LENGTH)
    chars = []
    next_int = random.next_int
    for _ in range(length):
        chars.append(special if next_int(13) == 0 else _LETTERS[next_int(26)])
    return "".join(chars).strip()


@lru_cache(maxsize=1)
def _reusable_extra() -> str:
    """``REUSABLE_EXTRA_STRING``: 1 MiB of letters the extras are cut from (a fixed seed here)."""
    random = SplittableRandom(0x6E65786D61726B)  # Nexmark: an unseeded SplittableRandom
    out: List[str] = []
    while len(out) < _REUSABLE_EXTRA_LENGTH:
        rnd = random.next_int()
        for _ in range(6):  # log_26(2^31) letters per int, as Nexmark (Java's % and / truncate)
            digit = abs(rnd) % 26
            out.append(chr(ord("a") + (digit if rnd >= 0 else -digit)))
            rnd = abs(rnd) // 26 * (1 if rnd >= 0 else -1)
    return "".join(out[:_REUSABLE_EXTRA_LENGTH])


def next_extra(random: SplittableRandom, current_size: int, desired_average_size: int) -> str:
    """``StringsGenerator.nextExtra``: pads an event to about its average size (+-20 %)."""
    if current_size > desired_average_size:
        return ""
    desired_average_size -= current_size
    delta = int(desired_average_size * 0.2 + 0.5)
    size = desired_average_size - delta + (0 if delta == 0 else random.next_int(2 * delta))
    reusable = _reusable_extra()
    offset = random.next_int(len(reusable) - size)
    return reusable[offset : offset + size]


@lru_cache(maxsize=1)
def _channel_urls() -> tuple:
    """The hot channels' urls and ``channel-<i>``'s url (Nexmark's ``CHANNEL_URL_CACHE``)."""
    random = SplittableRandom(0x75726C73)
    hot = tuple(_base_url(random) for _ in HOT_CHANNELS)
    cache = []
    for i in range(CHANNELS_NUMBER):
        url = _base_url(random)
        if random.next_int(10) > 0:
            url += "&channel_id=" + str(abs(_reverse_int(i)))
        cache.append(url)
    return hot, tuple(cache)


def _reverse_int(i: int) -> int:
    """Java's ``Integer.reverse`` (the bits of a 32-bit int reversed, as a signed int)."""
    value = int(f"{i & 0xFFFFFFFF:032b}"[::-1], 2)
    return value - (1 << 32) if value >= 1 << 31 else value


def _base_url(random: SplittableRandom) -> str:
    parts = [next_string(random, 5, "_") for _ in range(3)]
    return "https://www.nexmark.com/" + "/".join(parts) + "/item.htm?query=1"


# -- events ------------------------------------------------------------------------------------
def _person(config: NexmarkConfig, event_id: int, random: SplittableRandom, timestamp: int) -> Any:
    next_int = random.next_int
    person_id = last_base0_person_id(config, event_id) + FIRST_PERSON_ID
    name = FIRST_NAMES[next_int(len(FIRST_NAMES))] + " " + LAST_NAMES[next_int(len(LAST_NAMES))]
    email = next_string(random, 7) + "@" + next_string(random, 5) + ".com"
    credit_card = " ".join("%04d" % next_int(10000) for _ in range(4))
    city = US_CITIES[next_int(len(US_CITIES))]
    state = US_STATES[next_int(len(US_STATES))]
    size = 8 + len(name) + len(email) + len(credit_card) + len(city) + len(state)
    extra = next_extra(random, size, config.avg_person_byte_size)
    return make_row(PERSON_FIELDS, [person_id, name, email, credit_card, city, state, timestamp, extra])


def _auction(config: NexmarkConfig, number: int, event_id: int, random: SplittableRandom, timestamp: int) -> Any:
    next_int = random.next_int
    auction_id = last_base0_auction_id(config, event_id) + FIRST_AUCTION_ID
    if next_int(config.hot_sellers_ratio) > 0:
        seller = (last_base0_person_id(config, event_id) // HOT_SELLER_RATIO) * HOT_SELLER_RATIO
    else:
        seller = next_base0_person_id(config, event_id, random)
    seller += FIRST_PERSON_ID
    category = FIRST_CATEGORY_ID + next_int(NUM_CATEGORIES)
    initial_bid = next_price(random)
    # nextAuctionLengthMs: up to twice the time until num_in_flight_auctions more auctions exist
    events_for_auctions = (config.num_in_flight_auctions * config.total_proportion) // config.auction_proportion
    horizon = config.timestamp_for_event(number + events_for_auctions) - timestamp
    expires = timestamp + 1 + _next_long(random, max(horizon * 2, 1))
    item_name = next_string(random, 20)
    description = next_string(random, 100)
    reserve = initial_bid + next_price(random)
    size = 8 + len(item_name) + len(description) + 8 + 8 + 8 + 8 + 8
    extra = next_extra(random, size, config.avg_auction_byte_size)
    values = [auction_id, item_name, description, initial_bid, reserve, timestamp, expires, seller, category, extra]
    return make_row(AUCTION_FIELDS, values)


def _bid(config: NexmarkConfig, event_id: int, random: SplittableRandom, timestamp: int) -> Any:
    next_int = random.next_int
    if next_int(config.hot_auction_ratio) > 0:
        auction = (last_base0_auction_id(config, event_id) // HOT_AUCTION_RATIO) * HOT_AUCTION_RATIO
    else:
        auction = next_base0_auction_id(config, event_id, random)
    auction += FIRST_AUCTION_ID
    if next_int(config.hot_bidders_ratio) > 0:
        bidder = (last_base0_person_id(config, event_id) // HOT_BIDDER_RATIO) * HOT_BIDDER_RATIO + 1
    else:
        bidder = next_base0_person_id(config, event_id, random)
    bidder += FIRST_PERSON_ID
    price = next_price(random)
    hot_urls, channel_urls = _channel_urls()
    if next_int(HOT_CHANNELS_RATIO) > 0:
        i = next_int(len(HOT_CHANNELS))
        channel, url = HOT_CHANNELS[i], hot_urls[i]
    else:
        i = next_int(CHANNELS_NUMBER)
        channel, url = "channel-%d" % i, channel_urls[i]
    bidder += FIRST_PERSON_ID  # Nexmark's BidGenerator adds it twice
    extra = next_extra(random, 8 + 8 + 8 + 8, config.avg_bid_byte_size)
    return make_row(BID_FIELDS, [auction, bidder, price, channel, url, timestamp, extra])


def event_at(config: NexmarkConfig, index: int) -> Any:
    """Event ``index`` (0-based) of the stream ``config`` describes, as Flink nexmark's row:
    ``Row(event_type, person, auction, bid, dateTime)`` with the two other kinds None."""
    number = config.adjusted_event_number(index)
    event_id = config.first_event_id + number
    timestamp = config.timestamp_for_event(number)
    random = SplittableRandom(config.seed + event_id)
    rem = event_id % config.total_proportion
    if rem < config.person_proportion:
        return make_row(EVENT_FIELDS, [PERSON, _person(config, event_id, random, timestamp), None, None, timestamp])
    if rem < config.person_proportion + config.auction_proportion:
        auction = _auction(config, number, event_id, random, timestamp)
        return make_row(EVENT_FIELDS, [AUCTION, None, auction, None, timestamp])
    return make_row(EVENT_FIELDS, [BID, None, None, _bid(config, event_id, random, timestamp), timestamp])


def generate(config: NexmarkConfig, start: int = 0, stop: Optional[int] = None) -> Iterator[Any]:
    """Events ``start..stop-1`` (``stop`` None: to ``config.max_events``)."""
    stop = config.max_events if stop is None else stop
    for index in range(start, stop):
        yield event_at(config, index)


def events(count: int, config: Optional[NexmarkConfig] = None) -> List[Any]:
    """The first ``count`` events of ``config`` (default: Nexmark's defaults) as a list."""
    config = config or NexmarkConfig()
    return [event_at(config, index) for index in range(count)]


# -- JSON ---------------------------------------------------------------------------------------
_NESTED = (("person", PERSON_FIELDS), ("auction", AUCTION_FIELDS), ("bid", BID_FIELDS))


def _nested(kind: str, fields: List[str], value: Any) -> Any:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise TypeError(f"events_from_json: field {kind!r} must be an object or null, got {type(value).__name__}")
    missing = [name for name in fields if name not in value]
    if missing:
        raise ValueError(f"events_from_json: {kind} lacks the fields {missing}")
    return make_row(fields, [value[name] for name in fields])


def events_from_json(dicts: Iterable[Dict[str, Any]]) -> List[Any]:
    """JSON objects of the event shape (``event_type``, ``person``/``auction``/``bid`` objects
    or null, ``dateTime`` epoch ms; ``dateTime`` may be left out) as the generator's rows."""
    rows = []
    for position, item in enumerate(dicts):
        if not isinstance(item, dict) or "event_type" not in item:
            raise ValueError(f"events_from_json: item {position} is not an object with an event_type")
        event_type = item["event_type"]
        if event_type not in (PERSON, AUCTION, BID):
            raise ValueError(f"events_from_json: item {position} has event_type {event_type!r} (0, 1 or 2)")
        nested = [_nested(kind, fields, item.get(kind)) for kind, fields in _NESTED]
        if nested[event_type] is None:
            raise ValueError(
                f"events_from_json: item {position} of event_type {event_type} lacks its {_NESTED[event_type][0]}"
            )
        timestamp = item.get("dateTime", nested[event_type]["dateTime"])
        rows.append(make_row(EVENT_FIELDS, [event_type, *nested, timestamp]))
    return rows


def event_to_json(event: Any) -> Dict[str, Any]:
    """The inverse of ``events_from_json`` for one event row."""
    return event.as_dict(recursive=True)


__all__ = [
    "NexmarkConfig",
    "SplittableRandom",
    "event_at",
    "generate",
    "events",
    "events_from_json",
    "event_to_json",
    "EVENT_FIELDS",
    "PERSON_FIELDS",
    "AUCTION_FIELDS",
    "BID_FIELDS",
    "PERSON",
    "AUCTION",
    "BID",
]
