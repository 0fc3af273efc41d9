"""An example third-party theseus plugin."""
