"""XMQ: a clustered MQTT 5.0 / 3.1.1 broker."""

__version__ = "0.1.0"
