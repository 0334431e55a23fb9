"""The exactly-once Kafka sink's committer (Flink's ``KafkaCommitter``) and the transaction
requests it and the writer share (``TransactionAdmin``).

A :class:`KafkaCommittable` names one Kafka transaction the writer prepared at a checkpoint:
its transactional id (``<prefix>-<subtask>-<n>``, used for that one transaction only), the
producer id and epoch the broker gave it. :meth:`KafkaCommitter.commit` runs once the checkpoint
completed (and again after a restore from it: commits are idempotent):

* if the producer that wrote the transaction is still alive in this process (the normal case),
  ``commit_transaction()`` on it (the writer hands it over through :func:`register_producer`);
* else the producer died with its process (a failover between the checkpoint's completion and
  its commit): the transaction is resumed by its producer id and epoch -- an ``EndTxn(commit)``
  request sent to the transaction coordinator as that producer would send it, as Flink's
  ``FlinkKafkaInternalProducer.resumeTransaction`` does. ``CONCURRENT_TRANSACTIONS`` (a commit or
  abort under way) and coordinator moves are retried until ``max.block.ms``. ``NoError`` is
  final. Measured against Kafka 4.4: the retry of a commit this request made answers
  ``NoError``; a commit repeated after the producer itself committed answers
  ``INVALID_TXN_STATE``; one after the id was initialised again, ``PRODUCER_FENCED`` -- the
  same answers a transaction Kafka aborted gets. So a fenced or invalid-state answer
  (``PRODUCER_FENCED``, ``INVALID_PRODUCER_EPOCH``, ``INVALID_TXN_STATE``, an unknown producer id)
  is told apart by ``DescribeTransactions``: ``CompleteCommit`` (or ``PrepareCommit``, then
  waited for) with the same producer id means it was committed before; anything else
  means Kafka aborted it -- its transaction timed out (``transaction.timeout.ms``) before the
  job recovered, or another producer used the same transactional id -- and its records are
  lost: logged as an error naming the transaction, and the job goes on, as Flink's committer
  does (failing would fail every restore from this checkpoint again).

Kafka 4's two-phase commit (KIP-939, ``transaction.two.phase.commit.enable``) would let a new
producer keep a prepared transaction, but neither librdkafka 2.16 (confluent-kafka) nor any other
maintained Python client offers it, and Kafka 4.4 itself rejects ``keepPreparedTxn`` with
``UNSUPPORTED_VERSION``; so the transaction is resumed by producer id and epoch as Flink does,
through kafka-python's admin client (``KafkaAdminClient``: ``DescribeTransactions``,
``ListTransactions``, and its request manager for ``EndTxn``), which confluent-kafka lacks.

Thread-safety: a committer and a ``TransactionAdmin`` belong to one task thread; the live
producer registry is shared by the subtasks of a process and locked.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

from raylink.connectors.kafka.client import KafkaConnectorError
from raylink.core.sink import Committer

LOG = logging.getLogger(__name__)

#: answers to EndTxn that are worth retrying until max.block.ms
_RETRIABLE = frozenset(
    {
        "ConcurrentTransactionsError",
        "CoordinatorLoadInProgressError",
        "CoordinatorNotAvailableError",
        "NotCoordinatorError",
        "RequestTimedOutError",
        "KafkaTimeoutError",
        "KafkaConnectionError",
        "NodeNotReadyError",
        "NoBrokersAvailable",
    }
)
#: answers meaning the transaction is no longer open under that producer id and epoch
_ENDED = frozenset(
    {
        "ProducerFencedError",
        "InvalidProducerEpochError",
        "InvalidTxnStateError",
        "InvalidProducerIdMappingError",
        "UnknownProducerIdError",
        "TransactionalIdNotFoundError",
    }
)


@dataclass(frozen=True)
class KafkaCommittable:
    """One prepared transaction (Flink's ``KafkaCommittable``)."""

    transactional_id: str
    producer_id: int
    epoch: int


# -- live producers: the writer hands a prepared transaction's producer to the committer --------
_LIVE_LOCK = threading.Lock()
_LIVE: Dict[str, Any] = {}


def register_producer(transactional_id: str, producer: Any) -> None:
    """``producer`` holds the prepared transaction ``transactional_id`` until it is committed."""
    with _LIVE_LOCK:
        _LIVE[transactional_id] = producer


def take_producer(transactional_id: str) -> Optional[Any]:
    with _LIVE_LOCK:
        return _LIVE.pop(transactional_id, None)


def forget_producers(transactional_ids: Sequence[str]) -> None:
    """Drop producers without ending their transactions (their committables may still be
    committed by producer id and epoch, from here or another process)."""
    with _LIVE_LOCK:
        for transactional_id in transactional_ids:
            _LIVE.pop(transactional_id, None)  # dropping the handle neither commits nor aborts


def live_producer_count() -> int:
    with _LIVE_LOCK:
        return len(_LIVE)


class TransactionAdmin:
    """The transaction requests confluent-kafka does not offer, over kafka-python's
    ``KafkaAdminClient`` (created on first use)."""

    def __init__(self, bootstrap_servers: str, timeout_ms: int) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.timeout_ms = timeout_ms
        self._admin: Any = None

    def _client(self) -> Any:
        if self._admin is None:
            from kafka import KafkaAdminClient
            from kafka.errors import KafkaError

            try:
                self._admin = KafkaAdminClient(
                    bootstrap_servers=self.bootstrap_servers,
                    request_timeout_ms=max(1000, min(self.timeout_ms, 30_000)),
                    client_id="raylink-kafka-sink-admin",
                )
            except KafkaError as exc:
                raise KafkaConnectorError(
                    f"KafkaSink: no answer from the bootstrap servers {self.bootstrap_servers}: {exc}"
                ) from None
        return self._admin

    def describe(self, transactional_id: str) -> Optional[Tuple[str, int, int]]:
        """``(state, producer id, epoch)`` of ``transactional_id``; ``None`` if the broker
        never saw it. States: ``ONGOING``, ``PREPARE_COMMIT``, ``COMPLETE_COMMIT``, ``EMPTY``, ..."""
        from kafka.errors import TransactionalIdNotFoundError

        try:
            found = self._client().describe_transactions([transactional_id])[transactional_id]
        except TransactionalIdNotFoundError:
            return None
        state = getattr(found.state, "name", str(found.state))
        return state, int(found.producer_id), int(found.producer_epoch)

    def list_open(self) -> List[str]:
        """Transactional ids of every transaction open on the cluster (``ListTransactions``
        with state ``Ongoing``)."""
        listed = self._client().list_transactions(state_filters=["Ongoing"])
        return sorted({t.transactional_id for per_broker in listed.values() for t in per_broker})

    def end_transaction(self, transactional_id: str, producer_id: int, epoch: int, commit: bool) -> str:
        """Sends ``EndTxn`` for ``transactional_id`` as its producer; returns the answer's error
        name (``"NoError"`` on success)."""
        import kafka.errors as errors
        from kafka.protocol.producer.transaction import EndTxnRequest

        admin = self._client()

        async def send() -> Any:
            coordinator = await admin._find_coordinator_id(transactional_id, key_type=1)  # TRANSACTION
            request = EndTxnRequest(
                transactional_id=transactional_id, producer_id=producer_id, producer_epoch=epoch, committed=commit
            )
            return await admin._manager.send(request, node_id=coordinator)

        try:
            response = admin._manager.run(send)
        except errors.KafkaError as exc:
            return type(exc).__name__
        return errors.for_code(response.error_code).__name__

    def close(self) -> None:
        admin, self._admin = self._admin, None
        if admin is not None:
            try:
                admin.close()
            except Exception:  # closing only
                pass


def resume_and_commit(admin: TransactionAdmin, committable: KafkaCommittable, timeout_ms: int) -> bool:
    """Commits ``committable``'s transaction by its producer id and epoch (see the module
    docstring); ``True`` if it is committed (now or before), ``False`` if Kafka had aborted it.
    Raises :class:`KafkaConnectorError` if the coordinator did not settle it within ``timeout_ms``."""
    deadline = time.monotonic() + timeout_ms / 1000.0
    backoff = 0.02
    last = ""
    described: Optional[Tuple[str, int, int]] = None
    while True:
        last = admin.end_transaction(committable.transactional_id, committable.producer_id, committable.epoch, True)
        if last == "NoError":
            return True
        if last in _ENDED:
            described = admin.describe(committable.transactional_id)
            if described is not None and described[1] == committable.producer_id:
                if described[0] == "COMPLETE_COMMIT":
                    return True
                if described[0] == "PREPARE_COMMIT":  # being committed: wait for it to complete
                    last = "PREPARE_COMMIT"
                else:
                    break
            else:
                break
        elif last not in _RETRIABLE:
            raise KafkaConnectorError(
                f"KafkaSink: committing transaction {committable.transactional_id} (producer id "
                f"{committable.producer_id}, epoch {committable.epoch}) on {admin.bootstrap_servers} failed: {last}"
            )
        if time.monotonic() >= deadline:
            raise KafkaConnectorError(
                f"KafkaSink: transaction {committable.transactional_id} on {admin.bootstrap_servers} was not "
                f"committed within {timeout_ms} ms (max.block.ms); last answer: {last}"
            )
        time.sleep(backoff)  # the coordinator is still ending it: poll with a deadline
        backoff = min(backoff * 2, 0.5)
    LOG.error(
        "KafkaSink: transaction %s (producer id %d, epoch %d) could not be committed because Kafka no longer "
        "holds it open (%s, state %s): it was aborted, most likely because transaction.timeout.ms expired "
        "before the job recovered or another producer used the same transactional id; its records are lost",
        committable.transactional_id,
        committable.producer_id,
        committable.epoch,
        last,
        described[0] if described is not None else "unknown",
    )
    return False


class KafkaCommitter(Committer[KafkaCommittable]):
    """Commits the transactions of completed checkpoints (see the module docstring)."""

    def __init__(self, sink: Any) -> None:
        self.sink = sink
        self.timeout_ms = int(sink.max_block_ms)
        self.lost: List[str] = []  # transactions Kafka had aborted before their commit

    def commit(self, committables: Sequence[KafkaCommittable]) -> None:
        admin: Optional[TransactionAdmin] = None  # only for a recovery: no client kept between commits
        try:
            for committable in committables:
                producer = take_producer(committable.transactional_id)
                if producer is not None and self._commit_live(producer, committable):
                    continue
                if admin is None:
                    admin = TransactionAdmin(self.sink.bootstrap_servers, self.timeout_ms)
                if not resume_and_commit(admin, committable, self.timeout_ms):
                    self.lost.append(committable.transactional_id)
        finally:
            if admin is not None:
                admin.close()

    def _commit_live(self, producer: Any, committable: KafkaCommittable) -> bool:
        from confluent_kafka import KafkaException

        try:
            producer.commit_transaction(self.timeout_ms / 1000.0)
        except KafkaException as exc:
            LOG.warning(
                "KafkaSink: committing %s through its producer failed (%s); resuming it by producer id and epoch",
                committable.transactional_id,
                exc,
            )
            return False  # dropped without close(): close() would abort what may still be open
        producer.close()
        return True


__all__ = [
    "KafkaCommittable",
    "KafkaCommitter",
    "TransactionAdmin",
    "forget_producers",
    "live_producer_count",
    "register_producer",
    "resume_and_commit",
    "take_producer",
]
