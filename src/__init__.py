"""korral: Apache YuniKorn's scheduler core rebuilt in Python as an actor system."""
