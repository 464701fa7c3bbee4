"""The embedding analysis of an LLP run: aggregation scores, MDS, summary, figures, report."""
