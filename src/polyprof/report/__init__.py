"""Reports: terminal tables (rich) and the HTML report."""
