"""Code emitted by `derivations` (committed; a test proves it is current)."""
