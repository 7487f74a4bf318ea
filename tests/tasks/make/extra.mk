docs: ## build the docs
	@echo "building the docs"
