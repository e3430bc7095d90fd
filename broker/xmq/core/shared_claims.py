"""One copy per shared group of a re-sent inbound QoS 2 message (issue 12).

A persistent publisher's QoS 2 PUBLISH carries a cluster-wide message id
(``core.inbound_ids``), and a node whose claim read its packet id back routes a re-sent
PUBLISH (DUP) once more (``InboundMessageIds.route_again``). A shared group is picked per
routing: the re-routing node's own member first, the next member in round-robin order
otherwise, so the group got the message a second time through another member. Each routing
of such a message now claims the group in Redis before the member has it:

* a persistent member's QoS 1/2 record carries the group's marker
  (``shared:seen:<message id>:<group>/<filter>``) in its ``FENCED_WRITES`` write instead of a
  ``session:seen`` one: the record is pushed, and the marker set, only when the marker does
  not exist (else ``0``: the group has it, nothing is queued) — no extra command;
* a member without a record (a clean session, or a QoS 0 delivery) is given the message only
  once its claim of the same marker (``'c'``, in the same call as the node's other writes) is
  written (``deliver_claimed``); a group that has it already gets nothing. The publisher's
  held acknowledgement waits for the claim, as for a record.

The marker lives like the sessions' ``session:seen`` markers of the message (while the
publisher's exchange is open: ``session:qos2marks``, docs/cluster.md); it is written by
whichever node delivers, under that node's lease (fenced). A message a member gave up and
another member takes over (``shared_handoff``, a dropped link's SHARED frames) belongs to
the group already: it is handed on without its id (``handed_on``), so it claims nothing.
Only messages with an inbound id (QoS 2 from persistent publishers with
``max_queued_writes: 0``) are claimed; any other shared delivery costs one comparison more.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from xmq.core.routed_inbound_ids import is_inbound_message_id
from xmq.core.session import Delivery

if TYPE_CHECKING:
    from collections.abc import Callable

    from xmq.core.broker import Broker
    from xmq.core.cluster_ports import DurableHold, DurableStore
    from xmq.core.message import Message
    from xmq.core.session import Session, Subscription


def claim_id(message: Message) -> str:
    """The id under which a shared delivery of ``message`` claims its group: its inbound
    QoS 2 message id, or ``''`` (nothing to claim)."""
    if message.qos != 2:
        return ""
    forward_id = message.forward_id
    if forward_id and is_inbound_message_id(forward_id):
        return forward_id
    return ""


def handed_on(message: Message) -> Message:
    """``message`` as another member of its group takes it over: its group has it (claimed
    or recorded), so the copy carries no inbound id and claims nothing."""
    return message.without_id() if claim_id(message) else message


def deliver_claimed(
    broker: Broker,
    store: DurableStore,
    session: Session,
    share: Subscription,
    message: Message,
    qos: int,
    ids: tuple[int, ...],
    hold: DurableHold | None,
    on_done: Callable[[], None] | None,
) -> bool:
    """Give ``message`` to a member that keeps no record of it once the member's claim of
    the group is written; nothing when the group has it already. ``hold`` (the publisher's
    held ack) waits for the claim; ``on_done`` (a SHARED frame's) runs when the member has
    acknowledged it, or at once when nothing is delivered here. False when the member has no
    room for it now (the drop counted; nothing claimed); else True (the claim is on its way)."""
    if qos and not session.room_to_record(message):
        return False

    def claimed(won: bool) -> None:
        now = broker.now() if message.expires_at is not None else 0.0
        if not won or qos == 0:
            if on_done is not None:  # the group has it (another member), or QoS 0: settled
                on_done()
            if won:
                session.deliver(message, 0, False, ids, share, now)
            return
        delivery = Delivery(message, qos, False, ids, share)
        delivery.on_done = on_done
        if broker.sessions.get(session.client_id) is not session:
            # the member's session ended meanwhile: the group's message goes to another one
            _settle(delivery)
            broker.redispatch(delivery)
        elif not session.deliver_recorded(delivery, now):
            _settle(delivery)  # dropped (counted): nothing is left to wait for

    store.claim_shared(share, claim_id(message), hold, claimed)
    return True


def _settle(delivery: Delivery) -> None:
    on_done = delivery.on_done
    if on_done is not None:
        delivery.on_done = None
        on_done()
