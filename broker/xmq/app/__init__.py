"""xmq.app"""
