"""theseus.dispatch"""
