"""theseus.models"""
