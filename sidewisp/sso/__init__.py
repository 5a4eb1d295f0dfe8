"""Single sign-on with OpenID Connect beside the local log-in (issue 22 §1; README "Single sign-on")."""
