"""xmq.protocol"""
