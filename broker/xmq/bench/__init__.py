"""xmq.bench"""
