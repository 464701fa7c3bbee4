"""Image decoding: encoded bytes to uint8 pixels, the whole image (`decode`) or only the
window a random crop keeps (`crop_decode`), naming the file or record that fails."""
