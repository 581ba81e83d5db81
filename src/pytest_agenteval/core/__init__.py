"""Pure foundations: the models users write and agents return, errors, records, text, options."""
