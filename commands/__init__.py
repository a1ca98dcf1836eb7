"""The command language: parsing, validation, policy and help. No I/O here."""
