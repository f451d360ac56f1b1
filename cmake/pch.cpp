// The translation unit that compiles cmake/pch.hpp once (target extsvc_pch).
