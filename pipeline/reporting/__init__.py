"""What a person sees: progress bars counting every rank's work, figures for `snakemake --report`."""
