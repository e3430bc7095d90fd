"""The fault checker's roaming clients never send a QoS 2 PUBLISH again after its PUBREL.

The last QoS 2 duplicate of ``test_redis_faults.py::test_redis_paused_longer_than_the_lease``
(issue 12) was made by paho-mqtt, not by the cluster: the publisher had sent PUBREL, its
PUBCOMP was held (Redis paused in the release's round trip), every node went offline; the
client's first reconnect was refused (0x88) and its second sent the PUBLISH again — a new
message for the broker, which had released the id. ``keep_owed_pubrels`` keeps it a PUBREL.
"""

from __future__ import annotations

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion, MessageState

from tests.support.fault_checker import keep_owed_pubrels


def _client_owing(states: dict[int, MessageState]) -> mqtt.Client:
    client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="pub", protocol=mqtt.MQTTv5)
    client._clean_start = False  # a persistent session's reconnect
    for mid, state in states.items():
        message = mqtt.MQTTMessage(mid=mid, topic=b"t")
        message.qos = 2
        message.state = state
        client._out_messages[mid] = message
    return client


def test_a_pubrel_stays_a_pubrel_across_a_refused_reconnect() -> None:
    client = _client_owing({24: mqtt.mqtt_ms_wait_for_pubcomp, 25: mqtt.mqtt_ms_wait_for_pubrec})
    for _ in range(3):  # each reconnect: the first two refused, no CONNACK in between
        keep_owed_pubrels(client)
        client._messages_reconnect_reset()  # what paho's ``reconnect`` does first
    states = {mid: message.state for mid, message in client._out_messages.items()}
    assert states == {24: mqtt.mqtt_ms_resend_pubrel, 25: mqtt.mqtt_ms_publish}
    assert client._out_messages[25].dup  # a PUBLISH without its PUBREC is re-sent, as DUP
