"""Any agent that speaks Zed's Agent Client Protocol over stdio, as a tailagent backend."""
