"""The composition root: the one package that wires agent/, bot/ and worker/ together."""
