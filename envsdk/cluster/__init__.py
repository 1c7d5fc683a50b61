"""Where training runs: starting or joining Ray (``ray_session``) and SLURM job scripts (``slurm``)."""
