"""Reports: the papers' result tables as data, and tables and plots of our runs against them."""
