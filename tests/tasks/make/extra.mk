docs:
	@echo "building the docs"
