"""Command-line tools of Horae that talk to a broker over its public APIs; they import nothing from the broker."""
