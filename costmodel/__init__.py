"""The numpy roofline core: hardware and model specs, parallel layouts, phase costs, sweeps."""
