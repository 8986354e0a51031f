"""The pauses between rounds of attempts, as the Rust client's (leasehold-client's limits.rs and
attempts.rs): short at first, doubling to a ceiling, each stretched at random by up to as much
again, so that the clients one failure struck together do not all retry together."""

import random
from typing import Iterator

# The pause after the first round (every node tried once), in seconds.
ROUND_PAUSE = 0.025
# The longest pause, before its jitter: short beside an election.
MAX_ROUND_PAUSE = 0.2


def round_pauses() -> Iterator[float]:
    """The pauses after each round of a call's attempts, in seconds: from ``ROUND_PAUSE``,
    doubling up to ``MAX_ROUND_PAUSE``, each stretched at random by up to as much again."""
    pause = ROUND_PAUSE
    while True:
        yield pause * (1 + random.random())
        pause = min(2 * pause, MAX_ROUND_PAUSE)
