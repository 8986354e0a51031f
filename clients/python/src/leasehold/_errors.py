"""What a failed call says: the node's status, read from its google.rpc.ErrorInfo, and whether
a write may have been applied."""

from __future__ import annotations

from typing import Any, Dict, Optional

import grpc
from google.rpc import error_details_pb2, status_pb2

# Metadata keys a node sets on every status it makes itself (leasehold-proto's constants).
ORIGIN_KEY = "leasehold-origin"
INDETERMINATE_KEY = "leasehold-indeterminate"
SESSION_KEY = "leasehold-session"
DETAILS_KEY = "grpc-status-details-bin"
ERROR_DOMAIN = "leasehold"
# The ErrorInfo reason of a node the cluster removed: it never serves again.
REMOVED_REASON = "REMOVED"
# The ErrorInfo reason of a request naming a session the store does not have.
SESSION_UNKNOWN = "SESSION_UNKNOWN"
# A registration past a cap on open sessions: asking again at once opens none.
SESSIONS_EXHAUSTED = "SESSIONS_EXHAUSTED"
# An acquire past the cap on the leases one identity created, a put past the cap on the rows it
# created: nothing makes room but a lease of its forgotten or a row of its deleted.
LEASES_EXHAUSTED = "LEASES_EXHAUSTED"
ROWS_EXHAUSTED = "ROWS_EXHAUSTED"
# Every reason given back at once, never retried: a cap the caller is at.
CAPS_REACHED = frozenset({SESSIONS_EXHAUSTED, LEASES_EXHAUSTED, ROWS_EXHAUSTED})


class LeaseholdError(Exception):
    """A call failed: a node refused it (bad input, denied, no quorum...) or no node answered.

    ``code`` is the gRPC status code, ``reason`` the node's ErrorInfo reason (``""`` when no
    node produced the status: a lost connection, a timeout), ``metadata`` the ErrorInfo's facts
    (``field`` for bad input, ``leader_address``...). ``indeterminate`` is true when the failed
    call was a write that may have been applied; it is then an :class:`IndeterminateError`.
    """

    def __init__(
        self,
        code: grpc.StatusCode,
        message: str,
        *,
        reason: str = "",
        metadata: Optional[Dict[str, str]] = None,
        indeterminate: bool = False,
        from_node: bool = False,
        session_unknown: bool = False,
    ) -> None:
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message
        self.reason = reason
        self.metadata = dict(metadata or {})
        self.indeterminate = indeterminate
        self.from_node = from_node
        self.session_unknown = session_unknown

    @classmethod
    def of(cls, error: grpc.RpcError) -> "LeaseholdError":
        """What a gRPC failure says, read as any gRPC client can: the ErrorInfo detail first,
        the metadata keys where a status carries no detail."""
        if isinstance(error, StreamFailure):
            return error.failure
        code = error.code() if callable(getattr(error, "code", None)) else grpc.StatusCode.UNKNOWN
        message = error.details() if callable(getattr(error, "details", None)) else str(error)
        metadata = error.trailing_metadata() if hasattr(error, "trailing_metadata") else None
        trailing: Dict[str, Any] = {m.key: m.value for m in (metadata or ())}
        info = error_info(trailing.get(DETAILS_KEY))
        reason, facts = (info.reason, dict(info.metadata)) if info is not None else ("", {})
        indeterminate = facts.get("indeterminate") == "true" or INDETERMINATE_KEY in trailing
        return cls(
            code or grpc.StatusCode.UNKNOWN,
            message or "",
            reason=reason,
            metadata=facts,
            indeterminate=indeterminate,
            from_node=info is not None or ORIGIN_KEY in trailing,
            session_unknown=reason == SESSION_UNKNOWN or SESSION_KEY in trailing,
        )

    @classmethod
    def refused(cls, error) -> "LeaseholdError":
        """A node's refusal of a call on the ``Batch`` stream (a ``BatchError``): the code,
        reason and facts its unary call's status carries."""
        return cls(
            CODES.get(error.code, grpc.StatusCode.UNKNOWN),
            error.message,
            reason=error.reason,
            metadata={**error.facts, "indeterminate": "true" if error.indeterminate else "false"},
            indeterminate=error.indeterminate,
            from_node=True,
            session_unknown=error.reason == SESSION_UNKNOWN,
        )


# gRPC's status codes by number, as a ``BatchError`` carries them.
CODES: Dict[int, grpc.StatusCode] = {code.value[0]: code for code in grpc.StatusCode}


class StreamFailure(grpc.RpcError):
    """A call on the ``Batch`` stream failed (see ``_batch``): ``failure`` says how, as the
    unary call's status would; ``debug_error_string`` is the stream's, if it failed."""

    def __init__(self, failure: LeaseholdError, debug: str = "") -> None:
        super().__init__(str(failure))
        self.failure = failure
        self.debug = debug

    def debug_error_string(self) -> str:
        return self.debug


class IndeterminateError(LeaseholdError):
    """A write failed without an answer after an attempt that may have applied it: read the
    state (``get``, ``get_lease``) before acting as if it had not happened."""


def error_info(details: Optional[bytes]) -> Optional[error_details_pb2.ErrorInfo]:
    """The node's ErrorInfo in a status's ``grpc-status-details-bin``, if it has one."""
    if not details:
        return None
    status = status_pb2.Status.FromString(details)
    for detail in status.details:
        info = error_details_pb2.ErrorInfo()
        if detail.Unpack(info) and info.domain == ERROR_DOMAIN:
            return info
    return None
