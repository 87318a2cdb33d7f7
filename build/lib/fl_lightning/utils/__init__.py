"""Small shared utilities: keyed random generators and flat parameter buffers."""
