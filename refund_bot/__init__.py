"""The composition root: the one package that wires agent/, bot/, worker/ and demo/ together."""
