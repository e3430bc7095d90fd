"""The XMQ Kubernetes operator (kopf)."""
