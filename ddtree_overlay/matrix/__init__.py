"""`matrix`: every supported release's patch set applied, imported on CPU and rolled back."""
