"""The portal's web forms, one module per area. They validate input shape only; the domain
apps' services hold the rules, and their refusals are shown next to the fields they name."""
