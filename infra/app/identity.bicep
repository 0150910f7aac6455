// The one user-assigned managed identity the Function App uses for everything:
// its host storage (AzureWebJobsStorage), the vault account, every staging account,
// Application Insights ingestion and the Flex Consumption deployment container.
// No account key or connection string is ever handed to the app.

@description('Name of the user-assigned managed identity.')
param name string

@description('Azure region of the identity.')
param location string

@description('Tags applied to the identity.')
param tags object

resource identity 'Microsoft.ManagedIdentity/userAssignedIdentities@2023-01-31' = {
  name: name
  location: location
  tags: tags
}

output id string = identity.id
output name string = identity.name
output clientId string = identity.properties.clientId
output principalId string = identity.properties.principalId
