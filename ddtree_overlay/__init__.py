"""ddtree-overlay: DDTree tree speculative decoding for an installed SGLang, as a reversible overlay."""

__version__ = "0.1.0"
