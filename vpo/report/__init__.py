"""The reporting layer, everything after evaluation (cheap, and never retrains):

aggregate  every cell's results -> mean and standard error over training seeds (CSV)
tables     the paper's tables (CSV, Markdown, LaTeX, HTML)
kit        the shared figure kit: method looks, fonts, panels, bands, titles
figures    every figure, one function per file name, and FIGURES, the table `vpo plot <stem>`
           (plot.py) and the rules (rules/figures.smk) are built from
"""
