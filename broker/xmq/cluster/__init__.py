"""xmq.cluster"""
