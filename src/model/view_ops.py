"""What an application owner tells the scheduler's view, one typed operation per change.

The owner produces them (plain code, ``AppEffects.view_ops``, in the order the changes happened) and
the application actor sends them in one ``ViewOps`` message (``korral.actors.messages``); the scheduler
dispatches on the type. They live in the model because the owner, which must not import actors,
builds them.
"""

from __future__ import annotations

from korral.model.allocation import Allocation, AskSpec
from korral.model.app.state import ApplicationState
from korral.records import frozen


@frozen
class PutAsks:
    """Add asks (each replacing the one with the same key), in the order the owner took them in: one
    operation per burst of new asks. Each is the owner's immutable spec, shared: the view keeps its own
    progress on it (the SI ask is converted once, by the owner)."""

    asks: tuple[AskSpec, ...]


@frozen
class DropAsk:
    """Remove an ask, if the view still has this generation of it."""

    allocation_key: str
    generation: int


@frozen
class RollBack:
    """A proposal the owner refused: undo it."""

    allocation: Allocation


@frozen
class Forget:
    """An allocation released by its owner."""

    allocation: Allocation


@frozen
class AdoptRecovered:
    """An allocation the RM reported as already running, accepted by its owner."""

    allocation: Allocation


@frozen
class UndoReplacement:
    """A real allocation the owner would not swap in for its placeholder: hand the decision back."""

    allocation: Allocation


@frozen
class Swap:
    """The RM confirmed a replacement: ``real`` takes the place of its placeholder."""

    placeholder_uuid: str
    real: Allocation


@frozen
class MarkReleasing:
    """The owner asked the RM to release an allocation (a timeout); it stays booked until confirmed."""

    uuid: str
    termination: int


@frozen
class Unpreempt:
    """A preemption victim the owner could not release (it does not hold it, or it is being released
    already): the view takes back its releasing mark, and the ask that chose it may try again later."""

    uuid: str


@frozen
class OwnerState:
    """The application's state after a transition only its owner decides (a new ask runs it, it
    completes, fails, resumes): the view's state follows it. What a booking does to the state the view
    does itself as it books, so that is not published; nor is a terminal state (``AppGone`` follows)."""

    state: ApplicationState


ViewOp = (
    PutAsks
    | DropAsk
    | RollBack
    | Forget
    | AdoptRecovered
    | UndoReplacement
    | Swap
    | MarkReleasing
    | Unpreempt
    | OwnerState
)
