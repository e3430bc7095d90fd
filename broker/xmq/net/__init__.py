"""xmq.net"""
