"""xmq.store"""
