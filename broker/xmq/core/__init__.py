"""xmq.core"""
