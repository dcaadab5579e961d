"""Phase pools (prefill, midfill, decode) on modelled hardware, and the run's clock."""
