"""The accuracy suite kind: LRA tasks (generated or real), noise, the encoder, training, incoherence, one cell."""
