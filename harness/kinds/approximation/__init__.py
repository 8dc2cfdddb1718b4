"""The approximation suite: how far each efficient attention is from exact softmax attention, and at what cost."""
