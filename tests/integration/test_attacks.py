"""Issue 25, the attack suite: every way in that a process without the job
token might try, each with the job's outcome asserted unchanged.

Each attack is marked `attack`; the run's summary line says how many were
tried (conftest.py). Sections: the store and the rendezvous (admission,
forged rounds, guessing, replays, frames, slow clients, squatters, hosts
outside the job), then the agent's other ports and what a worker can see
(the launcher's port, the health port, the token's exposure)."""
import pytest

pytestmark = pytest.mark.attack

# ---------------------------------------------------------------------------
# The store and the rendezvous.

# ---------------------------------------------------------------------------
# The launcher's port, the health port, and what a worker can see.
