"""Image decoding: encoded bytes to uint8 pixels, whole or a crop's window."""
