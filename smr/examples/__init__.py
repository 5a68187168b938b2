"""Example jobs installed with the package, so that the documentation's commands run from
the wheel as from a clone: ``smr.examples.wordcount:job`` and its other forms."""
