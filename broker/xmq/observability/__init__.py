"""xmq.observability"""
