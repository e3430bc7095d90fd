"""xmq.auth"""
