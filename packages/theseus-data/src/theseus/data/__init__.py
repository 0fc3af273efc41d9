"""theseus.data"""
