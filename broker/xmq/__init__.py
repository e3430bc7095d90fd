"""XMQ: a clustered MQTT 5.0 / 3.1.1 broker."""

from xmq.native_build import BUILD

__version__ = "0.1.0"
__all__ = ["BUILD", "__version__"]
