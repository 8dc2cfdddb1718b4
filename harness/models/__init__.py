"""What the kinds that train share: the encoder classifier and its trained probes."""
