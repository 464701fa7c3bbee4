"""The linear probe: frozen-trunk features, their cache and the linear readout."""
