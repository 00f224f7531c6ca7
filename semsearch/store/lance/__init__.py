"""The optional LanceDB index: a folder of Lance tables, for indexes that outgrow one file."""
